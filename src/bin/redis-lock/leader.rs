//! `leader`: who leads an election, read once, or told at each change (and when the watch
//! cannot tell).

use std::io::Write;
use std::sync::mpsc;
use std::thread;

use redis_blpop_lock::inspect::Primitive;
use redis_blpop_lock::{Election, Watched};

use crate::place::Place;
use crate::queues::not_on_a_quorum;
use crate::render::{epoch_ms, json_string, rfc3339};
use crate::top::on_stop_signals;
use crate::{exit, Failure, Outcome};

/// What a watch waits for: the election's next change, or a signal to stop.
#[derive(Clone)]
enum Event {
    Changed(Watched),
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
        let led = leader.is_some();
        out!("{}", line(name, &Watched::from(leader), json));
        return Ok(if led { 0 } else { exit::FREE });
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
            for change in changes {
                if events.send(Event::Changed(change)).is_err() {
                    break;
                }
            }
        })
        .map_err(|e| Failure::new(exit::OS, format!("cannot start a thread: {e}")))?;
    let mut stdout = std::io::stdout();
    for event in received {
        let Event::Changed(change) = event else {
            break;
        };
        let shown = writeln!(stdout, "{}", line(name, &change, json));
        if shown.and_then(|()| stdout.flush()).is_err() {
            // Nobody is reading any more (`redis-lock leader NAME --watch | head -1`).
            break;
        }
    }
    Ok(0)
}

/// A leader, nobody, or not knowing (a watch's), as one line: `election "NAME": led by "INFO"
/// in term N since RFC3339`, `election "NAME": no leader` or `election "NAME": leader unknown
/// (REASON)`; in JSON {"name":..,"known":true,"led":true,"id":..,"info":..,"term":..,"since":..,
/// "since_ms":..,"reason":null}, where nobody leads "led" is false and the rest null, and where
/// the watch cannot tell "known" is false, "led" null too, and "reason" says why.
fn line(name: &str, watched: &Watched, json: bool) -> String {
    let (leader, unknown) = match watched {
        Watched::Leader(leader) => (Some(leader), None),
        Watched::Nobody => (None, None),
        Watched::Unknown { reason } => (None, Some(reason.clone())),
        // A state this redis-lock does not know of: not a claim that nobody leads.
        other => (None, Some(format!("{other:?}"))),
    };
    match (leader, unknown, json) {
        (Some(leader), _, false) => format!(
            "election {name:?}: led by {:?} in term {} since {}",
            leader.info,
            leader.term,
            rfc3339(leader.since)
        ),
        (Some(leader), _, true) => format!(
            "{{\"name\":{},\"known\":true,\"led\":true,\"id\":{},\"info\":{},\"term\":{},\
             \"since\":\"{}\",\"since_ms\":{},\"reason\":null}}",
            json_string(name),
            json_string(&leader.id),
            json_string(&leader.info),
            leader.term,
            rfc3339(leader.since),
            epoch_ms(leader.since)
        ),
        (None, Some(reason), false) => {
            format!("election {name:?}: leader unknown ({})", one_line(&reason))
        }
        (None, Some(reason), true) => format!(
            "{{\"name\":{},\"known\":false,\"led\":null,\"id\":null,\"info\":null,\
             \"term\":null,\"since\":null,\"since_ms\":null,\"reason\":{}}}",
            json_string(name),
            json_string(&reason)
        ),
        (None, None, false) => format!("election {name:?}: no leader"),
        (None, None, true) => format!(
            "{{\"name\":{},\"known\":true,\"led\":false,\"id\":null,\"info\":null,\
             \"term\":null,\"since\":null,\"since_ms\":null,\"reason\":null}}",
            json_string(name)
        ),
    }
}

/// `text` on one line: a reason is an error's text, which may span several.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
