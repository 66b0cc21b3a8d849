//! `run`: take the lock, run the command under it, give the lock back.

use std::io::{ErrorKind, IsTerminal, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus};
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
use crate::{exit, Failure, Outcome, RunArgs};

/// How often the command is checked for having exited and the lock for having been lost.
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
    let cancel = CancelToken::new();
    let id = match &args.id {
        Some(id) => id.clone(),
        None => default_id(place, &args.name)?,
    };
    // Kept for as long as redis-lock runs: the wait's thread borrows it, and a queue
    // primitive's wait, which no signal can end, may still be in it when redis-lock exits.
    let target: &'static Target = Box::leak(Box::new(Target::new(place, &args, id, &cancel)?));
    // Listening starts before the wait, so a signal during it cannot kill redis-lock
    // at a moment when it may just have taken the lock.
    let (events, received) = mpsc::channel();
    listen_for_signals(events.clone())?;
    match take(place, target, &cancel, &args, &events, &received)? {
        Taken::Yes(hold) => supervise(place, hold, &args, &received),
        Taken::Busy => {
            err!(
                "redis-lock: lock {:?} is busy{}; nothing ran",
                args.name,
                target.held_by(place)
            );
            Ok(args.conflict_exit_code)
        }
        Taken::Interrupted(signal) => {
            err!(
                "redis-lock: interrupted while waiting for lock {:?}; nothing ran",
                args.name
            );
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
    let waiting = WaitingLine::show(place, target, &args.name);
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
            release_quietly(place, hold, &args.name);
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

/// Runs the command while the lock is held, passing signals on and watching for the lock
/// being lost; releases the lock once the command has exited.
fn supervise(
    place: &Place,
    hold: Box<dyn Hold + '_>,
    args: &RunArgs,
    received: &Receiver<Event>,
) -> Outcome {
    // A signal that came with the lock still counts as one during the wait.
    while let Ok(event) = received.try_recv() {
        if let Event::Signal(origin) = event {
            release_quietly(place, hold, &args.name);
            err!(
                "redis-lock: interrupted before running the command; released lock {:?}",
                args.name
            );
            return Ok(signal_exit_code(origin.signal));
        }
    }
    // `required = true` makes clap refuse an empty command.
    let Some((program, program_args)) = args.command.split_first() else {
        release_quietly(place, hold, &args.name);
        return Err(Failure::new(exit::USAGE, "no command to run"));
    };
    let own_group = !std::io::stdin().is_terminal();
    let mut command = Command::new(program);
    command.args(program_args);
    dies_with_us(&mut command, own_group);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            release_quietly(place, hold, &args.name);
            let code = match e.kind() {
                ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::CANNOT_EXECUTE,
            };
            return Err(Failure::new(code, format!("cannot run {program:?}: {e}")));
        }
    };
    let mut lost = false;
    let status = loop {
        match received.recv_timeout(WATCH_INTERVAL) {
            // On the terminal, Ctrl-C and friends reach the whole foreground process group,
            // the command included; sending them again would count as a second Ctrl-C.
            Ok(Event::Signal(origin)) if origin.cause == Cause::Kernel && !own_group => {}
            Ok(Event::Signal(origin)) => signal_child(&child, origin.signal, own_group),
            Ok(Event::Acquired(_)) | Err(RecvTimeoutError::Timeout) => {}
            // Unreachable while the signal thread lives; watching goes on without it.
            Err(RecvTimeoutError::Disconnected) => thread::sleep(WATCH_INTERVAL),
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                release_quietly(place, hold, &args.name);
                return Err(Failure::new(
                    exit::OS,
                    format!("lost track of the command: {e}"),
                ));
            }
        }
        if !lost && hold.lost() {
            lost = true;
            err!(
                "redis-lock: lost lock {:?} (reset by someone else, or not renewed in time); \
                 sending SIGTERM to the command",
                args.name
            );
            signal_child(&child, SIGTERM, own_group);
        }
    };
    let code = exit_code(status);
    match hold.release() {
        // A lost lock may have come back to us with a late renewal; the command was told to
        // stop all the same, and the caller must hear that its work may have overlapped.
        Ok(()) | Err(Error::NotAcquired { .. }) if lost => Ok(exit::LOST),
        Ok(()) => Ok(code),
        Err(Error::NotAcquired { .. }) => {
            err!(
                "redis-lock: lock {:?} was lost before the command ended (reset by someone \
                 else, or not renewed in time)",
                args.name
            );
            Ok(exit::LOST)
        }
        Err(e) => {
            err!(
                "redis-lock: could not release lock {:?}: {}; it frees itself within {:?}",
                args.name,
                place.failure(e).message,
                args.expire
            );
            Ok(if lost { exit::LOST } else { code })
        }
    }
}

/// Gives the lock back if it is ours. Only used on the way out, where a failure changes
/// nothing: a lock left behind frees itself at its expiry, and its renewal dies with us.
fn release_quietly(place: &Place, hold: Box<dyn Hold + '_>, name: &str) {
    match hold.release() {
        Ok(()) | Err(Error::NotAcquired { .. }) => {}
        Err(e) => err!(
            "redis-lock: could not release lock {name:?}: {}",
            place.failure(e).message
        ),
    }
}

/// Sends `signal` to the command, or to its whole process group when it has one of its own
/// (a shell pipeline, a script's children), as a terminal would.
fn signal_child(child: &Child, signal: c_int, own_group: bool) {
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        return;
    };
    let pid = if own_group { -pid } else { pid };
    log::debug!("sending signal {signal} to the command (pid {pid})");
    // SAFETY: kill(2) takes plain integers and touches no memory of ours. The pid is still our
    // child's: it is only reaped by `try_wait`, which has not yet seen it exit, so no other
    // process (or group) can have been given the same id.
    if unsafe { libc::kill(pid, signal) } != 0 {
        log::debug!(
            "kill({pid}, {signal}) failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Makes the command die with redis-lock. The lock lives only as long as redis-lock renews
/// it: once redis-lock is gone (SIGKILL, a crash, the OOM killer), the lock expires and
/// another host may start the same job, so the command must not go on. SIGKILL, not SIGTERM:
/// a command that handles SIGTERM could run on for as long as it likes, overlapping the next
/// holder, and nobody is left to escalate.
///
/// Off a terminal the command also gets a process group of its own, so redis-lock's signals
/// reach the whole of it (a pipeline, a script's children). On a terminal it stays in
/// redis-lock's foreground group, so it can still read the terminal and Ctrl-C reaches it
/// directly.
fn dies_with_us(command: &mut Command, own_group: bool) {
    use std::os::unix::process::CommandExt;
    if own_group {
        command.process_group(0);
    }
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id();
        // SAFETY: the closure runs in the child between fork and exec, and calls only
        // prctl(2) and getppid(2), which are async-signal-safe, and builds an io::Error
        // from an errno (no allocation for a raw OS error).
        unsafe {
            command.pre_exec(move || {
                // The signal is tied to the thread that forks: this is the main thread,
                // which lives until redis-lock exits.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // redis-lock may have died between fork and prctl, before anyone was
                // there to signal: then the child has a new parent, and must not start.
                if u32::try_from(libc::getppid()).ok() != Some(parent) {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
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
    fn show(place: &Place, target: &Target, name: &str) -> WaitingLine {
        let mut stderr = std::io::stderr();
        if !stderr.is_terminal() {
            return WaitingLine { shown: false };
        }
        // Informational only: the wait itself will meet any Redis error.
        let holder = target.held_by(place);
        let _ = write!(stderr, "redis-lock: waiting for lock {name:?}{holder} ...");
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
