//! `redis-lock`: flock(1) for a fleet of hosts, and the operator's view and reset of the locks.

/// `println!` that ignores a closed stdout (`redis-lock status x | head -c1`) instead of
/// panicking: nothing is left to say to a reader that went away.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `eprintln!` that ignores a closed stderr, for the same reason.
macro_rules! err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod admin;
mod hold;
mod leader;
mod peek;
mod place;
mod queues;
mod render;
mod run;
mod supervise;
mod top;

use std::ffi::OsString;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::builder::NonEmptyStringValueParser;
use clap::{Args, Parser, Subcommand};

/// Exit codes of redis-lock's own outcomes; `run` otherwise exits with its command's code.
mod exit {
    /// The lock was busy (`--no-wait`, or `--timeout` passed), unless `--conflict-exit-code`.
    pub const CONFLICT: u8 = 1;
    /// `status`: the lock is free (0: held), so that `if redis-lock status NAME` reads true;
    /// `leader`: nobody leads, likewise.
    pub const FREE: u8 = 1;
    /// Bad usage, or `reset-all` without `--yes` where nobody can be asked.
    pub const USAGE: u8 = 2;
    /// An operator answered no at the `reset-all` prompt.
    pub const DECLINED: u8 = 1;
    /// A key where the lock should be holds something that is not a lock (sysexits'
    /// EX_DATAERR): no retry will help, and `reset --force` clears it.
    pub const CORRUPT: u8 = 65;
    /// Redis could not be reached or answered with an error (sysexits' EX_UNAVAILABLE).
    pub const REDIS: u8 = 69;
    /// The lock was lost before the command ended (sysexits' EX_TEMPFAIL: worth another try).
    pub const LOST: u8 = 75;
    /// The system refused a thread or a signal handler (sysexits' EX_OSERR).
    pub const OS: u8 = 71;
    /// The command was found but could not be started, as in a shell.
    pub const CANNOT_EXECUTE: u8 = 126;
    /// The command was not found, as in a shell.
    pub const NOT_FOUND: u8 = 127;
}

const EXIT_CODES: &str = "\
Exit codes of `run` and `lead`:
  N      the command's own exit code
  128+N  the command was killed by signal N; or redis-lock got signal N while still
         waiting for the lock (or campaigning), and ran nothing
  1      the lock was busy (--no-wait, or --timeout passed) and nothing ran;
         --conflict-exit-code changes it (`run` only: `lead` always waits)
  2      bad usage (unknown option, missing `-- COMMAND`, bad URL, ...)
  65     the lock's key holds something that is not a lock, and nothing ran
         (`redis-lock reset --force NAME` deletes it)
  69     Redis could not be reached or failed, and nothing ran
  71     the system refused redis-lock a thread or a signal handler
  75     the lock was lost before the command ended (reset by someone else, or not
         renewed before its expiry), so its work may have overlapped another
         holder's; a command still running was sent SIGTERM (and SIGKILL if it
         did not exit within --kill-after); or the command ran for --max-hold
         and was stopped the same way; for `lead`: the leadership was lost
         (reset, or not renewed before its expiry) and the command stopped so
  126    the command could not be started
  127    the command was not found
Other commands exit 0 on success, 2 on bad usage, 65 for a key that is not a
lock, 69 when Redis fails; `status` exits 0 when the lock is held and 1 when it is
free; `leader` exits 0 when the election has a leader and 1 when it has none
(with --watch: 0 when stopped); `reset-all` exits 1 when the operator answers no.

The connection comes from --url, else $REDIS_URL, else redis://127.0.0.1:6379/.
With --cluster that URL is any node of a Redis Cluster (lock keys are then
lock:{NAME}); with --sentinel and --service, the sentinels name the primary, and
--url gives only the primary's credentials and database.
--url given 3 or more times, once per server, makes a quorum of independent
servers (Redlock): a lock is held when a majority of them hold it, and `status`
shows each server too. Twice is bad usage, and so is more than once with
--cluster or --sentinel; give every --url on the same side of the subcommand.
-v shows the library's own log lines too (-vv, -vvv: more; RUST_LOG, with -v,
picks them); without -v, redis-lock's own one-line messages are all there is.";

/// A distributed lock on Redis, compatible with python-redis-lock: run a command under a
/// lock shared by many hosts, look at a lock, or free one.
#[derive(Parser)]
#[command(name = "redis-lock", version, after_help = EXIT_CODES)]
struct Cli {
    /// The Redis server, as `redis://[[user]:password@]host[:port][/db]` or `rediss://...`
    /// Given 3 or more times (once per server): a quorum of independent servers (Redlock),
    /// where a lock is held when a majority of them hold it.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "REDIS_URL",
        // The URL may hold a password: --help must not print it.
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379/"
    )]
    url: Vec<String>,
    /// The URL is a node of a Redis Cluster: locks live on whichever primary serves their
    /// slot, with keys lock:{NAME} (a NAME with a {tag} of its own keeps it).
    #[arg(long, global = true, conflicts_with = "sentinel")]
    cluster: bool,
    /// A sentinel's URL (give it once per sentinel): locks live on the primary that the
    /// sentinels name for --service, and follow it through failovers.
    #[arg(long, global = true, value_name = "URL", requires = "service")]
    sentinel: Vec<String>,
    /// The service (master name) the sentinels monitor.
    #[arg(long, global = true, value_name = "NAME", requires = "sentinel")]
    service: Option<String>,
    /// Seconds one round trip with Redis may take before it counts as failed (reset-all:
    /// always 5).
    #[arg(
        long,
        global = true,
        value_name = "SECS",
        default_value = "5",
        value_parser = positive_seconds,
        allow_negative_numbers = true
    )]
    io_timeout: Duration,
    /// Also show the library's log lines on stderr (-vv, -vvv: more detail).
    #[arg(long, short = 'v', global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Take the lock, run COMMAND while keeping it alive, release it when COMMAND ends.
    ///
    /// Waits for the lock unless --no-wait or --timeout says otherwise. SIGINT, SIGTERM and
    /// SIGHUP sent to redis-lock are passed on to the command (a Ctrl-C on the terminal
    /// already reaches both, and is not sent twice); the lock is released once the command
    /// has exited. If the lock is lost while the command runs (reset, or not renewed before
    /// its expiry), or the command runs for --max-hold, it gets SIGTERM, then SIGKILL if it
    /// has not exited --kill-after seconds later, and redis-lock exits 75 once it has exited.
    /// On Linux, if redis-lock itself is killed, the command is killed with it (SIGKILL):
    /// without redis-lock the lock expires, and the job may start elsewhere.
    #[command(after_help = EXIT_CODES)]
    Run(RunArgs),
    /// Campaign in the election NAME, waiting in line; run COMMAND while leading, with the
    /// term in $REDIS_LOCK_TERM and the info in $REDIS_LOCK_INFO; resign when it ends.
    ///
    /// Candidates lead one at a time, in the order they campaigned, each new leader with a
    /// larger term (a fencing token for the command's writes). SIGINT, SIGTERM and SIGHUP
    /// sent to redis-lock while it campaigns end the campaign, running nothing; while it
    /// leads they are passed on to the command, as `run` does. If the leadership is lost
    /// (an operator's `reset --election`, or not renewed before its expiry), the command gets
    /// SIGTERM, then SIGKILL if it has not exited --kill-after seconds later, and redis-lock
    /// exits 75 once it has exited. On Linux, if redis-lock itself is killed, the command is
    /// killed with it, and the next candidate leads at the lease's expiry.
    #[command(after_help = EXIT_CODES)]
    Lead(LeadArgs),
    /// Show the leader of the election NAME: its info, its term and since when it leads;
    /// exits 0 when there is one, 1 when there is none.
    ///
    /// Text: `election "NAME": led by "INFO" in term N since 2026-11-26T05:46:08.123Z` (RFC
    /// 3339, UTC, by the Redis server's clock), or `election "NAME": no leader`.
    Leader {
        /// The election's name (its keys are election:{NAME}:*).
        #[arg(value_parser = NonEmptyStringValueParser::new())]
        name: String,
        /// Print one JSON object: {"name":..,"known":true,"led":true,"id":..,"info":..,
        /// "term":..,"since":"2026-11-26T05:46:08.123Z","since_ms":..,"reason":null}; with
        /// nobody leading, "led" is false and the leader's fields are null.
        #[arg(long)]
        json: bool,
        /// Print the leader now, then a line (an object, with --json) at each change, as the
        /// election tells of it (nothing polls), until SIGINT, SIGTERM or SIGHUP (exit 0).
        /// When Redis is away or does not answer, one line says the leader is unknown and why
        /// (`leader unknown (REASON)`; in JSON "known" false, "led" null, and "reason").
        #[arg(long)]
        watch: bool,
    },
    /// Show whether the lock is held, by whom, and for how much longer; exits 0 when it is
    /// held, 1 when it is free.
    ///
    /// With --semaphore, --fair or --rwlock: that primitive's holders (id, units, expiry,
    /// fencing token) and its line of waiters, first first. With --election: its leader's
    /// hold (id, expiry, term) and the candidates in line.
    Status {
        /// The lock's name (its key is lock:NAME).
        #[arg(value_parser = NonEmptyStringValueParser::new())]
        name: String,
        #[command(flatten)]
        which: queues::Which,
        /// Print one JSON object: {"name":..,"held":..,"owner":..|null,"ttl_ms":..|null}; on
        /// a quorum with "servers":[{"server":"host:port/db","held":..|null,"owner":..|null,
        /// "ttl_ms":..|null,"error":..|null},...] besides.
        #[arg(long)]
        json: bool,
    },
    /// Every held lock: its name, owner and remaining expiry; then every semaphore, fair lock,
    /// read-write lock and election with a holder or a waiter: its holders and its line.
    List {
        /// Print one JSON array: [{"kind":"lock","name":..,"owner":..,"ttl_ms":..|null},...],
        /// then the queue primitives as `status --semaphore NAME --json` prints them.
        #[arg(long)]
        json: bool,
    },
    /// A live view of the held locks (name, owner, TTL, fencing token) and of how many were
    /// taken since the last refresh, then of the semaphores, fair locks, read-write locks and
    /// elections in use as `list` shows them, read again every --interval seconds until Ctrl-C.
    Top {
        /// Seconds between refreshes (fractions allowed).
        #[arg(
            long,
            value_name = "SECS",
            default_value = "1",
            value_parser = positive_seconds,
            allow_negative_numbers = true
        )]
        interval: Duration,
        /// Stop after N refreshes.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
        /// Print one JSON object per refresh, a line each: {"time":..,"locks":[{"name":..,
        /// "owner":..,"ttl_ms":..|null,"token":..|null},..],"acquisitions":..,
        /// "acquisitions_per_sec":..|null,"acquisitions_total":..,"queues":[..]}, each of
        /// "queues" as `status --semaphore NAME --json` prints it.
        #[arg(long)]
        json: bool,
    },
    /// Forcibly release a lock, whoever holds it; the first waiter, if any, takes it.
    ///
    /// With --semaphore, --fair or --rwlock: end the hold of the holder --id names (every
    /// holder's with --force), and hand it on to the first waiters. With --election: end the
    /// leader's term (the one --id names, if given); the first candidate in line leads next.
    Reset {
        /// The lock's name (its key is lock:NAME).
        #[arg(value_parser = NonEmptyStringValueParser::new())]
        name: String,
        /// Also delete the key if it holds something that is not a lock (exit code 65); with
        /// --semaphore, --fair or --rwlock: release every holder.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        which: queues::Which,
        /// The holder to release, by its id (`status` shows them); only with --semaphore,
        /// --fair, --rwlock or --election.
        #[arg(long, value_parser = NonEmptyStringValueParser::new())]
        id: Option<String>,
        /// The semaphore's permit count, so the permits go to the waiters that fit.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        permits: Option<u32>,
    },
    /// Forcibly release every lock (every lock:* key), and every hold and line of the
    /// semaphores, fair locks, read-write locks and elections, and wake their waiters.
    ResetAll {
        /// Do not ask for confirmation (needed when not run on a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

#[derive(Args)]
struct RunArgs {
    /// The lock's name (its key is lock:NAME).
    #[arg(value_parser = NonEmptyStringValueParser::new())]
    name: String,
    /// Seconds the lock lives without renewal; it is renewed every 2/3 of this while
    /// COMMAND runs, so a crashed host's lock frees itself after at most this long.
    #[arg(
        long,
        short = 'e',
        value_name = "SECS",
        default_value = "30",
        value_parser = positive_seconds,
        allow_negative_numbers = true
    )]
    expire: Duration,
    /// Wait at most this many seconds for the lock (fractions allowed; 0: one try).
    #[arg(
        long,
        short = 't',
        value_name = "SECS",
        value_parser = seconds,
        allow_negative_numbers = true
    )]
    timeout: Option<Duration>,
    /// Do not wait: if the lock is busy, run nothing and exit 1.
    #[arg(long, short = 'n', conflicts_with = "timeout")]
    no_wait: bool,
    /// The owner id stored in the lock while it is held (default: HOST:PID:RANDOM).
    #[arg(long, value_parser = NonEmptyStringValueParser::new())]
    id: Option<String>,
    /// Take one of N permits of the semaphore NAME (keys semaphore:{NAME}:*,
    /// or semaphore:=NAME:* when NAME has a {tag} of its own) instead of the
    /// lock: at most N runs on NAME at once, served in the order they asked. Every run on
    /// NAME should give the same N.
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        conflicts_with_all = ["read", "write", "fair"]
    )]
    permits: Option<u32>,
    /// Hold the read-write lock NAME (keys rwlock:{NAME}:*, or
    /// rwlock:=NAME:* when NAME has a {tag}) shared: runs with --read run
    /// together, but not while a --write run does, and not ahead of one that asked first.
    #[arg(long, conflicts_with_all = ["write", "fair"])]
    read: bool,
    /// Hold the read-write lock NAME exclusively: no other --read or --write run meanwhile.
    #[arg(long, conflicts_with = "fair")]
    write: bool,
    /// Take the fair lock NAME (keys fair-lock:{NAME}:*, or
    /// fair-lock:=NAME:* when NAME has a {tag}) instead of python-redis-lock's:
    /// runs take it in the order they asked.
    #[arg(long)]
    fair: bool,
    /// Take a fencing token with python-redis-lock's lock too (key lock-fence:NAME), which
    /// COMMAND gets as $REDIS_LOCK_FENCE, as it gets the token of the fair lock, a permit or a
    /// read-write lock: a number above every token handed out before on NAME, for the stores
    /// it writes to to refuse a stale holder's writes.
    #[arg(long, conflicts_with_all = ["permits", "read", "write", "fair"])]
    fencing: bool,
    /// Refuse a server that can evict keys (a maxmemory-policy other than noeviction, under
    /// which a held lock and its fencing counter can vanish): run nothing and exit 2. Without
    /// it, such a server gets a warning on stderr.
    #[arg(long)]
    refuse_evicting: bool,
    /// Stop COMMAND once it has run this many seconds under the lock (fractions allowed): it
    /// gets SIGTERM, as on a lost lock, and redis-lock exits 75 once it has exited.
    #[arg(
        long,
        value_name = "SECS",
        value_parser = positive_seconds,
        allow_negative_numbers = true
    )]
    max_hold: Option<Duration>,
    #[command(flatten)]
    kill_after: KillAfter,
    /// Exit with N instead of 1 when the lock is busy.
    #[arg(
        long,
        short = 'E',
        value_name = "N",
        default_value_t = exit::CONFLICT,
        value_parser = exit_code,
        allow_negative_numbers = true
    )]
    conflict_exit_code: u8,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// `--kill-after`, the same for `run` and `lead`.
#[derive(Args)]
struct KillAfter {
    /// Seconds COMMAND has to exit after redis-lock sends it SIGTERM (a lost lock or
    /// leadership, or `run`'s --max-hold) before it gets SIGKILL (its process group, off a
    /// terminal). What was lost is already free for others, so the overlap lasts at most this
    /// long. Signals passed on to COMMAND start no such timer.
    #[arg(
        long = "kill-after",
        value_name = "SECS",
        default_value = "5",
        value_parser = positive_seconds,
        allow_negative_numbers = true
    )]
    secs: Duration,
}

#[derive(Args)]
struct LeadArgs {
    /// The election's name (its keys are election:{NAME}:*, or election:=NAME:* when NAME has
    /// a {tag} of its own).
    #[arg(value_parser = NonEmptyStringValueParser::new())]
    name: String,
    /// What the leader publishes while it leads, for `leader` and the watchers to read (an
    /// address, say); also in COMMAND's $REDIS_LOCK_INFO. Default: this host's name.
    #[arg(long, value_name = "TEXT")]
    info: Option<String>,
    /// Seconds the leadership lives without renewal; it is renewed every 2/3 of this while
    /// COMMAND runs, so a crashed leader is succeeded after at most this long.
    #[arg(
        long,
        short = 'e',
        value_name = "SECS",
        default_value = "10",
        value_parser = positive_seconds,
        allow_negative_numbers = true
    )]
    expire: Duration,
    #[command(flatten)]
    kill_after: KillAfter,
    /// The candidate's id (default: HOST:PID:RANDOM); its leadership's id, as `status
    /// --election` and `leader --json` show it, adds a count and the process.
    #[arg(long, value_parser = NonEmptyStringValueParser::new())]
    id: Option<String>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

impl LeadArgs {
    /// `run`'s arguments for the same hold: it always waits, and has no --max-hold.
    fn into_run(self) -> RunArgs {
        RunArgs {
            name: self.name,
            expire: self.expire,
            timeout: None,
            no_wait: false,
            id: self.id,
            permits: None,
            read: false,
            write: false,
            fair: false,
            fencing: false,
            refuse_evicting: false,
            max_hold: None,
            kill_after: self.kill_after,
            conflict_exit_code: exit::CONFLICT,
            command: self.command,
        }
    }
}

/// Why redis-lock stops early: the exit code and the one line that says why.
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

type Outcome = Result<u8, Failure>;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    // One voice on stderr: redis-lock's own lines, and the library's only when asked for.
    if cli.verbose > 0 {
        let level = ["info", "debug", "trace"][usize::from(cli.verbose.min(3) - 1)];
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level)).init();
    }
    let outcome = check_not_split(&cli)
        .and_then(|()| {
            place::Place::from_options(
                &cli.url,
                cli.cluster,
                &cli.sentinel,
                cli.service.as_deref(),
                cli.io_timeout,
            )
        })
        .and_then(|place| match cli.command {
            Command::Run(args) => run::run(&place, args),
            Command::Lead(args) => run::lead(&place, args),
            Command::Leader { name, json, watch } => leader::leader(&place, &name, json, watch),
            Command::Status { name, which, json } => match which.primitive() {
                Some(kind) => queues::status(&place, kind, &name, json),
                None => admin::status(&place, &name, json),
            },
            Command::List { json } => admin::list(&place, json),
            Command::Top {
                interval,
                count,
                json,
            } => {
                let shape = if json {
                    top::Shape::Json
                } else {
                    top::Shape::Table
                };
                top::top(&place, interval, count, shape)
            }
            Command::Reset {
                name,
                force,
                which,
                id,
                permits,
            } => match which.primitive() {
                Some(kind) => queues::reset(&place, kind, &name, id.as_deref(), force, permits),
                None if id.is_some() || permits.is_some() => Err(Failure::new(
                    exit::USAGE,
                    "--id and --permits are for --semaphore, --fair, --rwlock and --election",
                )),
                None => admin::reset(&place, &name, force),
            },
            Command::ResetAll { yes } => admin::reset_all(&place, yes),
        });
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            err!("redis-lock: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

/// clap keeps the values of a global option from one side of the subcommand only
/// (`--url A run --url B --url C` gives B and C): a quorum or a set of sentinels silently
/// one server short. Options split that way are refused instead.
fn check_not_split(cli: &Cli) -> Result<(), Failure> {
    for (long, kept) in [("url", cli.url.len()), ("sentinel", cli.sentinel.len())] {
        if times_given(long) > kept {
            return Err(Failure::new(
                exit::USAGE,
                format!(
                    "--{long} is given both before and after the subcommand; give every \
                     --{long} on the same side"
                ),
            ));
        }
    }
    Ok(())
}

/// How many times `--LONG` is on the command line, up to the `--` before `run`'s command
/// (clap takes no option value that starts with `--`, so each of these is the option).
fn times_given(long: &str) -> usize {
    let flag = format!("--{long}");
    let with_value = format!("--{long}=");
    std::env::args_os()
        .skip(1)
        .take_while(|arg| arg != "--")
        .filter(|arg| {
            arg.to_str()
                .is_some_and(|arg| arg == flag || arg.starts_with(&with_value))
        })
        .count()
}

/// `--help` and `--version` print as clap makes them; a usage error becomes one line, not
/// clap's several (error, usage, tip), so that scripts and logs get one line per failure.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        // Nothing useful is left to do if stdout is closed.
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    // clap's first paragraph is the error (some run on, indented, over a few lines); its
    // tips are worth keeping; the usage summary is what --help is for.
    let rendered = e.render().to_string();
    let mut paragraphs = rendered.split("\n\n");
    let mut message = paragraphs
        .next()
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ");
    if let Some(stripped) = message.strip_prefix("error: ") {
        message = stripped.to_string();
    }
    for tip in paragraphs.flat_map(str::lines).map(str::trim) {
        if let Some(tip) = tip.strip_prefix("tip: ") {
            message = format!("{message}; {tip}");
        }
    }
    let runs_a_command = std::env::args_os()
        .skip(1)
        .find(|arg| arg == "run" || arg == "lead");
    if let Some(subcommand) = runs_a_command
        && matches!(
            e.kind(),
            ErrorKind::UnknownArgument | ErrorKind::MissingRequiredArgument
        )
    {
        let _ = write!(
            message,
            "; the command goes after `--`: redis-lock {} NAME -- COMMAND [ARGS...]",
            subcommand.to_string_lossy()
        );
    }
    err!("redis-lock: {message} (see redis-lock --help)");
    ExitCode::from(exit::USAGE)
}

fn seconds(s: &str) -> Result<Duration, String> {
    seconds_at_least(s, "≥ 0")
}

/// `s` as a number of seconds; `at_least` says, in an error, which numbers are welcome.
fn seconds_at_least(s: &str, at_least: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if secs < 0.0 {
        return Err(format!(
            "{s:?} is negative: give a number of seconds {at_least}"
        ));
    }
    Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("{s:?} is not a number of seconds {at_least}"))
}

fn exit_code(s: &str) -> Result<u8, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("{s:?} is not an exit code (0 to 255)"))
}

fn positive_seconds(s: &str) -> Result<Duration, String> {
    match seconds_at_least(s, "> 0")? {
        d if d.is_zero() => Err(format!("{s:?} is zero: give a number of seconds > 0")),
        d if d < Duration::from_millis(1) => Err(format!("{s:?} is under a millisecond")),
        d => Ok(d),
    }
}
