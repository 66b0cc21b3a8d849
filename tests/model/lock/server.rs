//! The plain lock's keys as the scripts change them (scripts/acquire.lua, unlock.lua,
//! extend.lua, reset.lua, give_back.lua, and the crate's read of owner, TTL and counter): the checker's server,
//! and what the differential test expects of the real one. Time is in ticks: the checker's
//! steps, or, in the differential test, real sleeps longer than a short expiry.

/// A time on the model server's clock, in ticks.
pub type Tick = u16;

/// The tokens a tick of the clock makes room for: more than the grants of one tick.
pub const TOKENS_PER_TICK: u64 = 1000;

/// What is left of a key's expiry, as `PTTL` says of a key that is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ttl {
    Forever,
    Left(Tick),
}

/// A rule of the server broken on purpose, for the `catches_*` tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flaw {
    None,
    /// `unlock.lua` without its owner check: any client's unlock deletes the lock.
    UnlockAnyOwner,
    /// The fencing counter given the lock's expiry (a clean-up that "tidies" the counter with
    /// its lock, or an eviction): it is gone once the lock has expired, as after a restart
    /// without persistence. The clock's part of the token still makes it grow.
    FenceExpiresWithLock,
    /// The token from the clock alone, without the counter: two grants within one tick (one
    /// millisecond, on a server) get the same token.
    TokenFromClockOnly,
}

/// `lock:<name>`: the owner's id and when its expiry passes (`None`: no expiry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub owner: u8,
    pub expires: Option<Tick>,
}

/// The keys of one lock on one server, and the server's clock.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Server {
    pub now: Tick,
    pub lock: Option<Key>,
    /// `lock-signal:<name>`: an unlock deletes the list and pushes one element, so it holds one
    /// or none; `Some(expiry)` when it holds one.
    pub signal: Option<Tick>,
    /// `lock-fence:<name>`, the last token handed out: 0 when the key is not there.
    pub fence: u64,
    pub flaw: Flaw,
}

/// What a try answers (`acquire.lua` with fencing; `SET NX PX`, `GET`, `PTTL` without).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TryReply {
    Acquired(Option<u64>),
    Busy { owner: u8, ttl: Ttl },
}

/// What `extend.lua` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExtendReply {
    Yes,
    NotOurs,
    NoExpiry,
}

/// What the crate's read (`MULTI GET PTTL GET EXEC`) answers: `ttl` is `None` when the lock is
/// not there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Read {
    pub owner: Option<u8>,
    pub ttl: Option<Ttl>,
    pub fence: Option<u64>,
}

impl Server {
    pub fn new(flaw: Flaw) -> Server {
        Server {
            now: 0,
            lock: None,
            signal: None,
            fence: 0,
            flaw,
        }
    }

    /// Time passes: keys whose expiry is reached are gone. Redis keeps a key through the
    /// millisecond of its expiry; gone at it here, the model frees a lock no later than Redis
    /// does, which only makes a second holder easier to find.
    pub fn advance(&mut self, ticks: Tick) {
        self.now += ticks;
        if self
            .lock
            .is_some_and(|key| key.expires.is_some_and(|at| at <= self.now))
        {
            self.lock = None;
            if self.flaw == Flaw::FenceExpiresWithLock {
                self.fence = 0;
            }
        }
        if self.signal.is_some_and(|at| at <= self.now) {
            self.signal = None;
        }
    }

    fn ttl(&self, key: Key) -> Ttl {
        key.expires
            .map_or(Ttl::Forever, |at| Ttl::Left(at - self.now))
    }

    /// `acquire.lua` (`fencing`) or `SET NX [PX]`, `GET`, `PTTL`: the lock and, with fencing, a
    /// token, or who holds it for how long. The token is a hybrid logical clock: the clock
    /// (ticks times [`TOKENS_PER_TICK`], as the script takes microseconds), or the counter + 1
    /// when that is not above it.
    pub fn acquire(&mut self, id: u8, expire: Option<Tick>, fencing: bool) -> TryReply {
        if let Some(key) = self.lock {
            return TryReply::Busy {
                owner: key.owner,
                ttl: self.ttl(key),
            };
        }
        self.lock = Some(Key {
            owner: id,
            expires: expire.map(|e| self.now + e),
        });
        if !fencing {
            return TryReply::Acquired(None);
        }
        let clock = u64::from(self.now) * TOKENS_PER_TICK;
        self.fence = match self.flaw {
            Flaw::TokenFromClockOnly => clock,
            _ => (self.fence + 1).max(clock),
        };
        TryReply::Acquired(Some(self.fence))
    }

    /// `unlock.lua`: deletes `id`'s lock and leaves one wake-up signal in the list. False (1)
    /// when the lock is not `id`'s.
    pub fn unlock(&mut self, id: u8, signal_expire: Tick) -> bool {
        let ours = match self.flaw {
            Flaw::UnlockAnyOwner => self.lock.is_some(),
            Flaw::None | Flaw::FenceExpiresWithLock | Flaw::TokenFromClockOnly => {
                self.lock.is_some_and(|k| k.owner == id)
            }
        };
        if !ours {
            return false;
        }
        self.signal = Some(self.now + signal_expire);
        self.lock = None;
        true
    }

    /// `reset.lua` without force: as `unlock.lua`, for the owner the operator read.
    pub fn reset(&mut self, owner: u8, signal_expire: Tick) -> bool {
        if self.lock.is_none_or(|k| k.owner != owner) {
            return false;
        }
        self.signal = Some(self.now + signal_expire);
        self.lock = None;
        true
    }

    /// `give_back.lua` (Redlock's give-back of a lost vote): deletes `id`'s lock, and with a
    /// `signal` expiry leaves one wake-up signal as an unlock does; without, the signal list
    /// is left as it was (freeing a minority's key lets nobody in). False (0) when the lock is
    /// not `id`'s.
    pub fn give_back(&mut self, id: u8, signal: Option<Tick>) -> bool {
        if self.lock.is_none_or(|k| k.owner != id) {
            return false;
        }
        self.lock = None;
        if let Some(expire) = signal {
            self.signal = Some(self.now + expire);
        }
        true
    }

    /// `extend.lua`: a new expiry for `id`'s lock.
    pub fn extend(&mut self, id: u8, expire: Tick) -> ExtendReply {
        match self.lock {
            Some(key) if key.owner != id => ExtendReply::NotOurs,
            None => ExtendReply::NotOurs,
            Some(Key { expires: None, .. }) => ExtendReply::NoExpiry,
            Some(key) => {
                self.lock = Some(Key {
                    expires: Some(self.now + expire),
                    ..key
                });
                ExtendReply::Yes
            }
        }
    }

    /// The read a lost reply is settled with.
    pub fn read(&self) -> Read {
        Read {
            owner: self.lock.map(|k| k.owner),
            ttl: self.lock.map(|k| self.ttl(k)),
            fence: (self.fence > 0).then_some(self.fence),
        }
    }

    /// A `BLPOP` that finds the signal takes it.
    pub fn pop_signal(&mut self) -> bool {
        self.signal.take().is_some()
    }
}
