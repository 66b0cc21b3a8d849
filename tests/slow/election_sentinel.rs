//! Elections behind Sentinel: a watch follows the election to the new primary after a
//! failover, and never stalls.

use std::time::Duration;

use redis_blpop_lock::{Election, Leader, Watch};

use crate::support::{secs, SentinelSet};

/// Generous: a failover takes a second or two, and the watch's connection then finds the
/// new primary.
const TOLD_WITHIN: Duration = Duration::from_secs(20);

/// The watch's next change that knows who leads (the leader, or `None` for nobody): while
/// the primary changes, the watch may not know for a while.
fn next_change(watch: &mut Watch) -> Option<Leader> {
    loop {
        let change = watch
            .changed_for(TOLD_WITHIN)
            .unwrap_or_else(|| panic!("no change reported within {TOLD_WITHIN:?}"));
        if change.is_known() {
            return change.into_leader();
        }
    }
}

#[test]
fn a_watch_behind_sentinel_reports_the_changes_made_on_the_new_primary_after_a_failover() {
    let set = SentinelSet::start();
    let backend = set.backend();
    let election = || {
        Election::builder(&backend, "jobs")
            .io_timeout(secs(20))
            .build()
            .unwrap()
    };
    let candidate = election();
    let leadership = candidate.campaign("a").unwrap();
    let mut watch = election().watch().unwrap();
    assert_eq!(next_change(&mut watch).map(|l| l.info), Some("a".into()));
    set.failover();
    // The election moved with the data: the leader resigns on the new primary, and a new
    // leader takes office there; the watch reports both.
    leadership.resign().unwrap();
    assert_eq!(next_change(&mut watch), None);
    let again = candidate.campaign("b").unwrap();
    let seen = next_change(&mut watch).expect("the new leader");
    assert_eq!((seen.info.as_str(), seen.term), ("b", again.term()));
}
