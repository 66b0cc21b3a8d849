//! The [`Election`](crate::Election) shell, for both APIs: campaigns over the queue engine's
//! [`Acquirer`](crate::driver::acquirer::Acquirer), one unit of capacity 1, whose holder leads.

/// The election's types and methods on one API (see [`for_api`]).
macro_rules! election {
    (
        rt = $rt:ty,
        asyncness = [$($asyncness:tt)?],
        run = $run:ident,
        head = $head:literal,
        path = $path:literal,
        aw = $aw:literal,
        prefix = $prefix:literal,
    ) => {
        mod election_api {
            use std::time::{Duration, Instant};

            use $crate::{Backend, CancelToken, Error, Leader, LockBuilder};
            use $crate::driver::acquirer::Acquirer;
            use $crate::driver::election::Term;
            use $crate::driver::hub::Watching;
            use $crate::protocol::lease::Wait;
            use $crate::protocol::primitive::Primitive;
            use $crate::shell::ended;
            use $crate::shell::$run;

            /// A leader election shared by every handle of the same name, on the fair queue
            /// engine: candidates lead one at a time, in the order they campaigned, and each
            /// new leader's term is larger than the last (a fencing token). See the crate
            /// docs' "Leader election" section.
            ///
            /// The leader holds a lease (30 s by default, renewed while it leads): a leader
            /// that crashes is succeeded at its expiry by the next candidate in line. Anyone
            /// can read the leader ([`leader`](Self::leader)) or watch it change
            /// ([`watch`](Self::watch)) without campaigning.
            ///
            /// ```no_run
            #[doc = $head]
            /// let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let election = ", $path, "Election::new(&client, \"scheduler\")?;")]
            #[doc = concat!("let leadership = election.campaign(\"10.0.0.5:8080\")", $aw, "?;")]
            /// println!("leading in term {}", leadership.term());
            /// // ... run the jobs while `!leadership.lost()` ...
            #[doc = concat!("leadership.resign()", $aw, "?;")]
            /// # Ok(())
            /// # }
            /// ```
            pub struct Election {
                acquirer: Acquirer<$rt>,
            }

            /// A term of office: the election is this handle's until it resigns, drops this, or
            /// loses the lease ([`lost`](Self::lost)). Dropped, it resigns (a failure is
            /// logged, and the lease ends at its expiry).
            #[must_use = "the leadership is given up as soon as it is dropped"]
            pub struct Leadership {
                pub(super) term: Term<$rt>,
                info: String,
            }

            impl Election {
                /// A handle on the election `name`, with the default settings. Refused on a
                /// [`Quorum`](crate::Quorum) ([`Error::Unsupported`]).
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let election = ", $path, "Election::new(&client, \"scheduler\")?;")]
                /// assert_eq!(election.name(), "scheduler");
                /// # Ok(())
                /// # }
                /// ```
                pub fn new(
                    backend: &(impl Backend + ?Sized),
                    name: impl Into<String>,
                ) -> Result<Election, Error> {
                    Election::builder(backend, name).build()
                }

                /// A builder for an election handle: the leader's lease (`expire`), heartbeat,
                /// I/O timeout, id, cancel token.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::time::Duration;
                #[doc = concat!("let election = ", $path, "Election::builder(&client, \"scheduler\")")]
                ///     .expire(Duration::from_secs(5))
                ///     .build()?;
                /// # Ok(())
                /// # }
                /// ```
                pub fn builder<B: Backend + ?Sized>(
                    backend: &B,
                    name: impl Into<String>,
                ) -> LockBuilder<Election> {
                    LockBuilder::new(backend, name.into()).on_queue_engine()
                }

                /// The election's name (its keys are `election:{<name>}:*`, or
                /// `election:=<name>:*` for a name with a hash tag of its own).
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let election = ", $path, "Election::new(&client, \"scheduler\")?;")]
                /// assert_eq!(election.name(), "scheduler");
                /// # Ok(())
                /// # }
                /// ```
                pub fn name(&self) -> &str {
                    &self.acquirer.settings.name
                }

                /// Waits in line until this handle leads, then publishes `info` (an address, a
                /// host name: anything the others should know of the leader).
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let election = ", $path, "Election::new(&client, \"scheduler\")?;")]
                #[doc = concat!("let leadership = election.campaign(\"host-a\")", $aw, "?;")]
                /// assert_eq!(leadership.info(), "host-a");
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn campaign(&self, info: &str) -> Result<Leadership, Error> {
                    $run!(self.run_for(info, Wait::Forever))?.ok_or_else(ended)
                }

                /// Campaigns for up to `timeout` (zero: leads only if nobody does and nobody
                /// waits); `None` when another still leads then, and this handle has left the
                /// line.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::time::Duration;
                #[doc = concat!("let election = ", $path, "Election::new(&client, \"scheduler\")?;")]
                #[doc = concat!("match election.try_campaign_for(\"host-a\", Duration::from_secs(1))", $aw, "? {")]
                ///     Some(leadership) => println!("leading in term {}", leadership.term()),
                ///     None => println!("someone else leads"),
                /// }
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn try_campaign_for(
                    &self,
                    info: &str,
                    timeout: Duration,
                ) -> Result<Option<Leadership>, Error> {
                    $run!(self.run_for(info, Wait::timeout(Instant::now(), timeout)))
                }

                /// The leader now, or `None` (one round trip). A leader is reported once it
                /// has announced itself, and until its lease ends.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let election = ", $path, "Election::new(&client, \"scheduler\")?;")]
                #[doc = concat!("match election.leader()", $aw, "? {")]
                ///     Some(leader) => println!("{} leads since {:?}", leader.info, leader.since),
                ///     None => println!("nobody leads"),
                /// }
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn leader(&self) -> Result<Option<Leader>, Error> {
                    $run!(self.acquirer.leader())
                }

                /// Watches the leader: the watch's first change is the leader now, then one
                /// for each change, as it happens. Nothing polls: a new leader, or one that
                /// resigns, tells the watching processes, and a leader that crashes with nobody
                /// in line is found when its lease ends. All the watches of a process share its
                /// one waiting connection and one read of the leader per change. A change that
                /// another follows within that read is reported as the later one.
                ///
                /// A watch never reports a leader it cannot vouch for: the process reads the
                /// leader again when the lease it read ends, or this handle's lease
                /// ([`expire`](crate::LockBuilder::expire)) after its last word from the
                /// server, whichever comes first. A read that fails (the server is away, or
                /// does not answer within the [`io_timeout`](crate::LockBuilder::io_timeout)),
                /// or silence past the read that was due plus the I/O timeout, is reported as
                /// [`Watched::Unknown`](crate::Watched::Unknown): once, and within the lease
                /// plus the I/O timeout (and a grace of at most 250 ms) of the server's last
                /// word. A server killed is found at once, by the waiting connection that
                /// breaks. Once a read gets through again, the watch reports the leader, or
                /// nobody, even if that did not change.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::time::Duration;
                /// use redis_blpop_lock::Watched;
                ///
                #[doc = concat!("let election = ", $path, "Election::builder(&client, \"scheduler\")")]
                ///     .expire(Duration::from_secs(10))
                ///     .io_timeout(Duration::from_secs(2))
                ///     .build()?;
                #[doc = concat!("let mut watch = election.watch()", $aw, "?;")]
                /// loop {
                #[doc = concat!("    match watch.changed()", $aw, " {")]
                ///         Watched::Leader(leader) => println!("send jobs to {}", leader.info),
                ///         Watched::Nobody => println!("nobody leads: hold the jobs"),
                ///         // At most 12 s (and a grace) after the server's last word.
                ///         Watched::Unknown { reason } => println!("no telling who leads: {reason}"),
                ///         other => println!("{other:?}"),
                ///     }
                /// }
                /// # }
                /// ```
                pub $($asyncness)? fn watch(&self) -> Result<Watch, Error> {
                    let watching = $run!(self.acquirer.watch())?;
                    Ok(Watch { watching })
                }

                async fn run_for(
                    &self,
                    info: &str,
                    wait: Wait,
                ) -> Result<Option<Leadership>, Error> {
                    let term = self.acquirer.campaign(info, wait).await?;
                    Ok(term.map(|term| Leadership {
                        term,
                        info: info.to_owned(),
                    }))
                }
            }

            impl LockBuilder<Election> {
                /// Lets `token` cancel this handle's campaigns: a campaign cancelled while it
                /// waits returns [`Error::Cancelled`].
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// let token = redis_blpop_lock::CancelToken::new();
                #[doc = concat!("let election = ", $path, "Election::builder(&client, \"scheduler\")")]
                ///     .cancel_token(token.clone())
                ///     .build()?;
                /// # Ok(())
                /// # }
                /// ```
                pub fn cancel_token(self, token: CancelToken) -> Self {
                    self.cancelled_by(token)
                }

                /// Checks the settings and makes the handle. No connection is opened yet.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let election = ", $path, "Election::builder(&client, \"scheduler\").build()?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub fn build(self) -> Result<Election, Error> {
                    let (settings, transport, capacity) = self.checked_for(Primitive::Election)?;
                    Ok(Election {
                        acquirer: Acquirer::new(Primitive::Election, settings, transport, capacity),
                    })
                }
            }

            impl Leadership {
                /// The term: larger for every new leader of the election, so a store that
                /// remembers the highest term it has seen can refuse a deposed leader's writes.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let election = ", $path, "Election::new(&client, \"scheduler\")?;")]
                #[doc = concat!("let leadership = election.campaign(\"\")", $aw, "?;")]
                /// println!("term {}", leadership.term());
                /// # Ok(())
                /// # }
                /// ```
                pub fn term(&self) -> u64 {
                    self.term.term
                }

                /// What this leader published.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let election = ", $path, "Election::new(&client, \"scheduler\")?;")]
                #[doc = concat!("let leadership = election.campaign(\"host-a\")", $aw, "?;")]
                /// assert_eq!(leadership.info(), "host-a");
                /// # Ok(())
                /// # }
                /// ```
                pub fn info(&self) -> &str {
                    &self.info
                }

                /// This leadership's id, as [`Leader::id`] reports it.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let election = ", $path, "Election::new(&client, \"scheduler\")?;")]
                #[doc = concat!("let leadership = election.campaign(\"\")", $aw, "?;")]
                #[doc = concat!("assert_eq!(election.leader()", $aw, "?.map(|l| l.id).as_deref(), Some(leadership.id()));")]
                /// # Ok(())
                /// # }
                /// ```
                pub fn id(&self) -> &str {
                    self.term.held.id()
                }

                /// Whether the office may have slipped away: the lease expired without a
                /// renewal (a pause, a server away), or it was reset. Once true, it stays true:
                /// stop acting as leader. No round trip.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let election = ", $path, "Election::new(&client, \"scheduler\")?;")]
                #[doc = concat!("let leadership = election.campaign(\"\")", $aw, "?;")]
                /// assert!(!leadership.lost());
                /// # Ok(())
                /// # }
                /// ```
                pub fn lost(&self) -> bool {
                    self.term.held.lost()
                }

                /// A token cancelled once the office is lost, for work to stop by (the same
                /// [`CancelToken`] that cancels waits): a renewal found the term gone (an
                /// operator's reset), or the lease ran out (renewals failed, a pause, or
                /// [`max_hold`](crate::LockBuilder::max_hold) was reached). Never while this
                /// leader leads, nor by its resignation; cancelled already when taken after the
                /// loss. When and how, as for a lock:
                /// [`LockGuard::lost_token`](crate::LockGuard::lost_token).
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let election = ", $path, "Election::new(&client, \"scheduler\")?;")]
                #[doc = concat!("let leadership = election.campaign(\"\")", $aw, "?;")]
                /// let stop = leadership.lost_token();
                /// assert!(!stop.is_cancelled());
                /// # Ok(())
                /// # }
                /// ```
                pub fn lost_token(&self) -> CancelToken {
                    self.term.held.lost_token()
                }

                /// Gives the office up now and reports how that went: the next candidate in
                /// line leads, or nobody, and the watchers hear of it.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let election = ", $path, "Election::new(&client, \"scheduler\")?;")]
                #[doc = concat!("election.campaign(\"\")", $aw, "?.resign()", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn resign(self) -> Result<(), Error> {
                    $run!(self.term.resign())
                }
            }

            /// The changes of an election's leader, from [`Election::watch`]: each is what
            /// the watch knows from then on, a [`Watched`](crate::Watched): the leader,
            /// nobody, or that it cannot tell while the server does not answer.
            pub struct Watch {
                pub(super) watching: Watching,
            }

            impl std::fmt::Debug for Election {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.debug_struct(concat!($prefix, "Election"))
                        .field("name", &self.name())
                        .finish_non_exhaustive()
                }
            }

            impl std::fmt::Debug for Leadership {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.debug_struct(concat!($prefix, "Leadership"))
                        .field("term", &self.term())
                        .field("info", &self.info)
                        .finish_non_exhaustive()
                }
            }

            impl std::fmt::Debug for Watch {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.debug_struct(concat!($prefix, "Watch")).finish_non_exhaustive()
                }
            }
        }
        pub use election_api::*;
    };
}

pub(crate) use election;
