//! `leader`: who leads an election, read once, or told at each change.

use std::io::Write;
use std::sync::mpsc;
use std::thread;

use redis_blpop_lock::inspect::Primitive;
use redis_blpop_lock::{Election, Leader};

use crate::place::Place;
use crate::queues::not_on_a_quorum;
use crate::render::{epoch_ms, json_string, rfc3339};
use crate::top::on_stop_signals;
use crate::{exit, Failure, Outcome};

/// What a watch waits for: the election's next change, or a signal to stop.
#[derive(Clone)]
enum Event {
    Changed(Option<Leader>),
    Stop,
}

/// The leader of election `name`, as text or JSON: once (exit 0 when there is one, 1 when
/// there is none), or with `watch` at each change until a signal (exit 0).
pub(crate) fn leader(place: &Place, name: &str, json: bool, watch: bool) -> Outcome {
    not_on_a_quorum(place, Primitive::Election, name)?;
    let election = Election::builder(place.backend(), name)
        .io_timeout(place.io_timeout())
        .build()
        .map_err(|e| place.failure(e))?;
    if !watch {
        let leader = election.leader().map_err(|e| place.failure(e))?;
        out!("{}", line(name, leader.as_ref(), json));
        return Ok(if leader.is_some() { 0 } else { exit::FREE });
    }
    let (events, received) = mpsc::channel();
    // Before the watch starts, so that a Ctrl-C at any moment ends it cleanly.
    on_stop_signals(events.clone(), Event::Stop)?;
    let changes = election.watch().map_err(|e| place.failure(e))?;
    // The watch blocks with no way to end it: it waits on a thread of its own, which dies
    // with redis-lock, while this one also waits for the signals.
    thread::Builder::new()
        .name("watch".into())
        .spawn(move || {
            for leader in changes {
                if events.send(Event::Changed(leader)).is_err() {
                    break;
                }
            }
        })
        .map_err(|e| Failure::new(exit::OS, format!("cannot start a thread: {e}")))?;
    let mut stdout = std::io::stdout();
    for event in received {
        let Event::Changed(leader) = event else {
            break;
        };
        let shown = writeln!(stdout, "{}", line(name, leader.as_ref(), json));
        if shown.and_then(|()| stdout.flush()).is_err() {
            // Nobody is reading any more (`redis-lock leader NAME --watch | head -1`).
            break;
        }
    }
    Ok(0)
}

/// A leader, or nobody, as one line: `election "NAME": led by "INFO" in term N since
/// RFC3339` or `election "NAME": no leader`; in JSON {"name":..,"led":true,"id":..,"info":..,
/// "term":..,"since":..,"since_ms":..}, where nobody leads "led" is false and the rest null.
fn line(name: &str, leader: Option<&Leader>, json: bool) -> String {
    match (leader, json) {
        (Some(leader), false) => format!(
            "election {name:?}: led by {:?} in term {} since {}",
            leader.info,
            leader.term,
            rfc3339(leader.since)
        ),
        (None, false) => format!("election {name:?}: no leader"),
        (Some(leader), true) => format!(
            "{{\"name\":{},\"led\":true,\"id\":{},\"info\":{},\"term\":{},\"since\":\"{}\",\
             \"since_ms\":{}}}",
            json_string(name),
            json_string(&leader.id),
            json_string(&leader.info),
            leader.term,
            rfc3339(leader.since),
            epoch_ms(leader.since)
        ),
        (None, true) => format!(
            "{{\"name\":{},\"led\":false,\"id\":null,\"info\":null,\"term\":null,\
             \"since\":null,\"since_ms\":null}}",
            json_string(name)
        ),
    }
}
