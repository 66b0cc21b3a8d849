//! Leader election, for both runtimes: a campaign is a wait for the one unit of an election
//! on the queue engine ([`Acquirer`]), then the new leader's announcement; a leadership given
//! back leaves the election empty (`vacate`) when nobody was granted in its place. See
//! [`protocol::election`](crate::protocol::election) for the keys and scripts.

use std::time::Instant;

use super::acquirer::{Acquirer, Acquisition};
use super::hub::Watching;
use super::Runtime;
use crate::protocol::election::{self, Leader};
use crate::protocol::lease::Wait;
use crate::protocol::queue;
use crate::protocol::request::Request;
use crate::transport::send::send_repeatable;
use crate::Error;

/// One term of office: the acquisition that holds the election, and its term.
pub(crate) struct Term<R: Runtime> {
    pub(crate) held: Acquisition<R>,
    pub(crate) term: u64,
}

impl<R: Runtime> Acquirer<R> {
    /// Campaigns as `wait` allows, publishing `info` once elected: `None` when the wait ended
    /// first. A grant whose lease ran out before the announcement got through (a pause) is
    /// no term: the campaign goes on, in line again.
    pub(crate) async fn campaign(&self, info: &str, wait: Wait) -> Result<Option<Term<R>>, Error> {
        loop {
            let Some(mut held) = self.acquire(1, wait).await? else {
                return Ok(None);
            };
            let term = held
                .fencing_token()
                .ok_or_else(|| Error::unexpected(&"a grant without a fencing token"))?;
            let announce = election::announce(&self.keys, held.id(), term, info);
            if queue::parse_held(&self.keys, &self.send(&announce).await?)? {
                held.then_send(election::vacate(&self.keys, Some(term)));
                return Ok(Some(Term { held, term }));
            }
            log::warn!(
                "election {:?}: term {term} was lost before it was announced; campaigning again",
                self.settings.name
            );
        }
    }

    /// Who leads now (one round trip).
    pub(crate) async fn leader(&self) -> Result<Option<Leader>, Error> {
        let reply = self.send(&election::read(&self.keys)).await?;
        Ok(election::parse_read(&self.keys, &reply)?.leader)
    }

    /// Starts watching the leader: the first change is the leader now. The watch reads it
    /// at least once a lease of this handle's.
    pub(crate) async fn watch(&self) -> Result<Watching, Error> {
        let lease = self.settings.expire();
        let mut watching = self.hub.watch(&self.keys, self.settings.lapse(), lease);
        if let Some(wake) = watching.wake() {
            self.send(&wake).await?;
        }
        watching.start().map_err(Error::Thread)?;
        Ok(watching)
    }

    /// `request`, safe to send again, by the I/O timeout: its first reply.
    async fn send(&self, request: &Request) -> Result<redis::Value, Error> {
        let deadline = Instant::now() + self.settings.io_timeout;
        let mut answered = send_repeatable(&*self.transport, request, deadline).await?;
        Ok(answered.replies.swap_remove(0))
    }
}

impl<R: Runtime> Term<R> {
    /// Gives the office back: the next candidate in line leads, or nobody.
    pub(crate) async fn resign(self) -> Result<(), Error> {
        self.held.release().await
    }
}
