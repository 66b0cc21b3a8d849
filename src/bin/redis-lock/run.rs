//! `run`: take the lock, run the command under it, give the lock back; and `lead`, the same
//! for the leadership of an election.

use std::io::{ErrorKind, IsTerminal, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use libc::c_int;
use redis_blpop_lock::{CancelToken, Error};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::{Cause, Origin};

use crate::hold::{Hold, Target, Took};
use crate::place::Place;
use crate::render;
use crate::supervise::Supervised;
use crate::{exit, Failure, LeadArgs, Outcome, RunArgs};

/// How often the command is checked for having exited, the lock for having been lost, and
/// `--max-hold` and `--kill-after` for having passed (so they act up to this much late).
/// `Lock::lost` is a local check, so this costs no Redis traffic; signals are handled at once.
const WATCH_INTERVAL: Duration = Duration::from_millis(50);

/// The signals passed on to the command. A shell's job control and service managers stop
/// a job with these; anything else keeps its default effect.
const FORWARDED: [c_int; 3] = [SIGINT, SIGTERM, SIGHUP];

enum Event {
    Signal(Origin),
    Acquired(Took<'static>),
}

/// How the wait for the lock ended.
enum Taken {
    Yes(Box<dyn Hold>),
    Busy,
    Interrupted(c_int),
}

pub(crate) fn run(place: &Place, args: RunArgs) -> Outcome {
    take_and_run(place, &args, |id, cancel| {
        Target::new(place, &args, id, cancel)
    })
}

/// `run` for the leadership of an election: it always waits, and its command learns the
/// term and the info from its environment.
pub(crate) fn lead(place: &Place, args: LeadArgs) -> Outcome {
    let info = args.info.clone().unwrap_or_else(hostname);
    let args = args.into_run();
    take_and_run(place, &args, |id, cancel| {
        Target::election(place, &args, id, cancel, info)
    })
}

/// Takes what `target` makes (from the owner id and the cancel token that ends its waits),
/// and runs the command while it is held.
fn take_and_run(
    place: &Place,
    args: &RunArgs,
    target: impl FnOnce(String, &CancelToken) -> Result<Target, Failure>,
) -> Outcome {
    let cancel = CancelToken::new();
    let id = match &args.id {
        Some(id) => id.clone(),
        None => default_id(place, &args.name)?,
    };
    // Kept for as long as redis-lock runs: the wait's thread borrows it, and may still be in
    // it when redis-lock exits (a signal cancels the wait, which then leaves the line).
    let target: &'static Target = Box::leak(Box::new(target(id, &cancel)?));
    let what = target.what();
    // A server that can evict the lock's keys is said once, before the command runs: the
    // lock, and its fencing counter, can vanish while it runs. `--refuse-evicting` refuses it
    // instead, at the take.
    if !args.refuse_evicting {
        place.warn_evicting();
    }
    // Listening starts before the wait, so a signal during it cannot kill redis-lock
    // at a moment when it may just have taken the lock.
    let (events, received) = mpsc::channel();
    listen_for_signals(events.clone())?;
    match take(place, target, &cancel, args, &events, &received)? {
        Taken::Yes(hold) => supervise(place, hold, &what, args, &received),
        Taken::Busy => {
            err!(
                "redis-lock: {what} is busy{}; nothing ran",
                target.held_by(place)
            );
            Ok(args.conflict_exit_code)
        }
        Taken::Interrupted(signal) => {
            err!("redis-lock: interrupted while waiting for {what}; nothing ran");
            Ok(signal_exit_code(signal))
        }
    }
}

/// `HOST:PID:RANDOM`: an operator who sees it in `status` or `list` knows which host and
/// process hold the lock; the random part (the library's own id, 24 characters from the OS)
/// keeps it unique per run. python-redis-lock accepts any id.
fn default_id(place: &Place, name: &str) -> Result<String, Failure> {
    let random = place.lock(name).build().map_err(|e| place.failure(e))?;
    Ok(format!(
        "{}:{}:{}",
        hostname(),
        std::process::id(),
        random.id()
    ))
}

/// This host's name, or "localhost" when the system will not say.
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname(2) writes at most `buf.len()` bytes into `buf`, which we own.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..len]) {
        Ok(name) if ok && !name.is_empty() => name.to_string(),
        _ => "localhost".to_string(),
    }
}

/// Sends every forwarded signal that reaches redis-lock to `events`, from a thread of its own.
fn listen_for_signals(events: Sender<Event>) -> Result<(), Failure> {
    let os = |e: std::io::Error| Failure::new(exit::OS, format!("cannot handle signals: {e}"));
    let mut signals = SignalsInfo::<WithOrigin>::new(FORWARDED).map_err(os)?;
    thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for origin in signals.forever() {
                if events.send(Event::Signal(origin)).is_err() {
                    break;
                }
            }
        })
        .map_err(os)?;
    Ok(())
}

/// Takes the lock: one try, then (unless told not to wait) the lock's own blocking acquire
/// on a thread, which a signal ends through the lock's cancel token. A queue primitive's
/// wait has no cancel token: a signal ends the wait at once, and the place in line, with
/// any grant that came to it, lapses within the heartbeat's lapse window (2 s).
fn take(
    place: &Place,
    target: &'static Target,
    cancel: &CancelToken,
    args: &RunArgs,
    events: &Sender<Event>,
    received: &Receiver<Event>,
) -> Result<Taken, Failure> {
    let started = Instant::now();
    if let Some(hold) = acquired(place, target.try_take())? {
        return Ok(Taken::Yes(hold));
    }
    let timeout = if args.no_wait {
        Some(Duration::ZERO)
    } else {
        args.timeout
    };
    if timeout.is_some_and(|t| t <= started.elapsed()) {
        return Ok(Taken::Busy);
    }
    let remaining = timeout.map(|t| t.saturating_sub(started.elapsed()));
    let waiting = WaitingLine::show(place, target);
    let events = events.clone();
    thread::Builder::new()
        .name("acquire".into())
        .spawn(move || {
            // The receiver is gone only when redis-lock is exiting anyway.
            let _ = events.send(Event::Acquired(target.take(remaining)));
        })
        .map_err(|e| Failure::new(exit::OS, format!("cannot start a thread: {e}")))?;
    let mut interrupted = None;
    let taken = loop {
        match received.recv() {
            Ok(Event::Acquired(taken)) => break taken,
            Ok(Event::Signal(origin)) if interrupted.is_none() => {
                // Ends the wait; a grant that lands after this is released by the wait
                // itself, and the wake-up it used is passed on.
                interrupted = Some(origin.signal);
                cancel.cancel();
            }
            Ok(Event::Signal(_)) => {}
            // Unreachable: `events` outlives this wait.
            Err(mpsc::RecvError) => {
                return Err(Failure::new(exit::OS, "the wait for the lock was cut off"))
            }
        }
    };
    waiting.clear();
    if let Some(signal) = interrupted {
        // The lock was taken before the cancel reached the wait: give it back.
        if let Ok(Some(hold)) = taken {
            release_quietly(place, hold, &target.what());
        }
        return Ok(Taken::Interrupted(signal));
    }
    acquired(place, taken).map(|taken| taken.map_or(Taken::Busy, Taken::Yes))
}

/// The hold, if taken; held under our id elsewhere (`--id` shared with another holder) is
/// busy, not an error.
fn acquired<'t>(place: &Place, result: Took<'t>) -> Result<Option<Box<dyn Hold + 't>>, Failure> {
    match result {
        Ok(taken) => Ok(taken),
        Err(Error::AlreadyAcquired { .. }) => Ok(None),
        Err(e) => Err(place.failure(e)),
    }
}

/// Runs the command while `what` is held, passing signals on and stopping it when the hold
/// is lost or `--max-hold` passes; releases the hold once the command has exited.
fn supervise(
    place: &Place,
    hold: Box<dyn Hold + '_>,
    what: &str,
    args: &RunArgs,
    received: &Receiver<Event>,
) -> Outcome {
    // A signal that came with the lock still counts as one during the wait.
    while let Ok(event) = received.try_recv() {
        if let Event::Signal(origin) = event {
            release_quietly(place, hold, what);
            err!("redis-lock: interrupted before running the command; released {what}");
            return Ok(signal_exit_code(origin.signal));
        }
    }
    // `required = true` makes clap refuse an empty command.
    let Some((program, program_args)) = args.command.split_first() else {
        release_quietly(place, hold, what);
        return Err(Failure::new(exit::USAGE, "no command to run"));
    };
    let mut command =
        match Supervised::spawn(program, program_args, hold.env(), args.kill_after.secs) {
            Ok(command) => command,
            Err(e) => {
                release_quietly(place, hold, what);
                let code = match e.kind() {
                    ErrorKind::NotFound => exit::NOT_FOUND,
                    _ => exit::CANNOT_EXECUTE,
                };
                return Err(Failure::new(code, format!("cannot run {program:?}: {e}")));
            }
        };
    let started = Instant::now();
    let mut lost = false;
    let mut held_too_long = false;
    let status = loop {
        match received.recv_timeout(WATCH_INTERVAL) {
            // On the terminal, Ctrl-C and friends reach the whole foreground process group,
            // the command included; sending them again would count as a second Ctrl-C.
            Ok(Event::Signal(origin)) if origin.cause == Cause::Kernel && !command.own_group() => {}
            Ok(Event::Signal(origin)) => command.forward(origin.signal),
            Ok(Event::Acquired(_)) | Err(RecvTimeoutError::Timeout) => {}
            // Unreachable while the signal thread lives; watching goes on without it.
            Err(RecvTimeoutError::Disconnected) => thread::sleep(WATCH_INTERVAL),
        }
        match command.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                release_quietly(place, hold, what);
                return Err(Failure::new(
                    exit::OS,
                    format!("lost track of the command: {e}"),
                ));
            }
        }
        if !lost && hold.lost() {
            lost = true;
            command.stop(&format!(
                "lost {what} (reset by someone else, or not renewed in time)"
            ));
        }
        // Once the lock is lost, the command is stopping already and 75 is the exit code.
        if let Some(limit) = args.max_hold
            && !lost
            && !held_too_long
            && started.elapsed() >= limit
        {
            held_too_long = true;
            command.stop(&format!(
                "the command has held {what} for --max-hold {}",
                render::seconds(limit)
            ));
        }
    };
    // Stopped by redis-lock, the command did not finish its work, whatever code it chose.
    let code = if lost || held_too_long {
        exit::LOST
    } else {
        exit_code(status)
    };
    match hold.release() {
        // A lost lock may have come back to us with a late renewal; the command was told to
        // stop all the same, and the caller must hear that its work may have overlapped.
        Ok(()) | Err(Error::NotAcquired { .. }) if lost => Ok(exit::LOST),
        Ok(()) => Ok(code),
        Err(Error::NotAcquired { .. }) => {
            err!(
                "redis-lock: {what} was lost before the command ended (reset by someone else, \
                 or not renewed in time)"
            );
            Ok(exit::LOST)
        }
        Err(e) => {
            err!(
                "redis-lock: could not release {what}: {}; it frees itself within {:?}",
                place.failure(e).message,
                args.expire
            );
            Ok(code)
        }
    }
}

/// Gives `what` back if it is ours. Only used on the way out, where a failure changes
/// nothing: a hold left behind frees itself at its expiry, and its renewal dies with us.
fn release_quietly(place: &Place, hold: Box<dyn Hold + '_>, what: &str) {
    match hold.release() {
        Ok(()) | Err(Error::NotAcquired { .. }) => {}
        Err(e) => err!(
            "redis-lock: could not release {what}: {}",
            place.failure(e).message
        ),
    }
}

/// The command's exit code, or 128 + the signal that killed it, as a shell reports it.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(u8::MAX),
        (None, Some(signal)) => signal_exit_code(signal),
        (None, None) => u8::MAX,
    }
}

fn signal_exit_code(signal: c_int) -> u8 {
    u8::try_from(signal.saturating_add(128)).unwrap_or(u8::MAX)
}

/// "Waiting for lock ..., held by ..." on a terminal, erased once the wait is over.
struct WaitingLine {
    shown: bool,
}

impl WaitingLine {
    fn show(place: &Place, target: &Target) -> WaitingLine {
        let mut stderr = std::io::stderr();
        if !stderr.is_terminal() {
            return WaitingLine { shown: false };
        }
        // Informational only: the wait itself will meet any Redis error.
        let holder = target.held_by(place);
        let _ = write!(
            stderr,
            "redis-lock: waiting for {}{holder} ...",
            target.what()
        );
        let _ = stderr.flush();
        WaitingLine { shown: true }
    }

    fn clear(&self) {
        if self.shown {
            // Carriage return and "erase line": the line was informational.
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
    }
}
