//! The command that runs under a hold: started so that it dies with redis-lock, sent the
//! signals redis-lock passes on, and stopped when redis-lock itself decides it must stop
//! (SIGTERM, then SIGKILL if it lingers). Apart from `run`, so that any subcommand that runs
//! a command under a hold stops it the same way.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use libc::c_int;
use signal_hook::consts::{SIGKILL, SIGTERM};

use crate::render;

/// A running command, and when it gets SIGKILL if redis-lock has told it to stop.
pub(crate) struct Supervised {
    child: Child,
    own_group: bool,
    kill_after: Duration,
    /// When the first `stop` sent SIGTERM: later stops must not push the SIGKILL back, or a
    /// lock lost after `--max-hold` would give the command more than `kill_after` of overlap.
    /// An elapsed time, not a deadline: `kill_after` may be too large to add to an instant.
    stopped: Option<Instant>,
    killed: bool,
}

impl Supervised {
    /// Starts `program` with `env` added to redis-lock's environment; should redis-lock stop
    /// it, it gets SIGKILL if it has not exited `kill_after` after the SIGTERM.
    pub(crate) fn spawn(
        program: &OsString,
        args: &[OsString],
        env: Vec<(&str, String)>,
        kill_after: Duration,
    ) -> std::io::Result<Supervised> {
        let own_group = !std::io::stdin().is_terminal();
        let mut command = Command::new(program);
        command.args(args).envs(env);
        dies_with_us(&mut command, own_group);
        Ok(Supervised {
            child: command.spawn()?,
            own_group,
            kill_after,
            stopped: None,
            killed: false,
        })
    }

    /// Whether the command runs in a process group of its own (off a terminal): then a
    /// signal sent to redis-lock from the terminal has not reached it already.
    pub(crate) fn own_group(&self) -> bool {
        self.own_group
    }

    /// Passes on a signal sent to redis-lock. It starts no SIGKILL timer, as in timeout(1):
    /// the lock is still held and renewed while the command winds down, so nobody else can
    /// be running the job, and whoever sent the signal (systemd, an operator) chose it and
    /// escalates by their own rules.
    pub(crate) fn forward(&self, signal: c_int) {
        signal_child(&self.child, signal, self.own_group);
    }

    /// Sends the command SIGTERM, saying why (`reason`) on stderr, and SIGKILL `kill_after`
    /// later unless it has exited by then (`try_wait` sends it). Only the first stop signals:
    /// a second SIGTERM could cut short the clean-up the first one started.
    pub(crate) fn stop(&mut self, reason: &str) {
        if self.stopped.is_some() {
            err!("redis-lock: {reason}; the command was already sent SIGTERM");
            return;
        }
        err!("redis-lock: {reason}; sending SIGTERM to the command");
        signal_child(&self.child, SIGTERM, self.own_group);
        self.stopped = Some(Instant::now());
    }

    /// The command's status once it has exited; while it runs, sends the SIGKILL that a
    /// `stop` made due. Meant to be called often (every wake-up of the watch), since the
    /// SIGKILL goes no sooner than a call after it is due.
    pub(crate) fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        // Asked first: a command that exited in time gets no SIGKILL, and its pid, reaped
        // here, is never signalled again.
        if let Some(status) = self.child.try_wait()? {
            return Ok(Some(status));
        }
        if !self.killed
            && self
                .stopped
                .is_some_and(|stopped| stopped.elapsed() >= self.kill_after)
        {
            self.killed = true;
            err!(
                "redis-lock: the command did not exit within --kill-after {} of SIGTERM; \
                 sending SIGKILL",
                render::seconds(self.kill_after)
            );
            signal_child(&self.child, SIGKILL, self.own_group);
        }
        Ok(None)
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
