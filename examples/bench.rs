//! How fast is the lock, as a multiple of the network's round trip?
//!
//! ```text
//! cargo run --release --example bench -- [--url URL] [--seconds S] [--concurrency 1,2,6]
//!     [--hold-ms 0,10] [--impl ours,polling,python] [--json]
//!     [--cell loop,names,wait1,crash,overshoot] [--trials N] [--expire-ms E]
//!     [--timeout-ms 50,300,1000]
//! cargo run --release --example bench --features cluster -- --cluster [--cluster-replicas 0|1] [--seconds S]
//!     [--concurrency ..] [--hold-ms ..] [--json] [--cell loop,names,wait1]
//! cargo run --release --example bench -- --quorum N [--impl ours,redlock-polling] [--seconds S]
//!     [--concurrency ..] [--hold-ms ..] [--json]
//! cargo run --release --example bench --features tokio -- [--impl ours,ours-async] [--cell loop,scale]
//!     [--tasks 10000] [--names 100] [--seconds S] [--concurrency ..] [--hold-ms ..] [--json]
//! cargo run --release --example bench --features bench-rslock -- --impl ours-async,rslock [..]
//! cargo run --release --example bench -- --cell semaphore,rwlock [--permits 4] [--readers 6]
//!     [--writers 2] [--concurrency 1,8,32] [--hold-ms 0,10] [--seconds S] [--json]
//! cargo run --release --example bench --features bench-distributed-lock -- --cell semaphore,rwlock
//!     --impl ours,distributed-lock [..]
//! cargo run --release --example bench -- --cell permit-crash,dead-waiter,fifo [--trials N]
//!     [--expire-ms E]
//! cargo run --release --example bench -- --impl ours,ours-fair [..]
//! cargo run --release --example bench -- --cell engine-cost [--holders 0,100,1000,10000]
//!     [--waiters 10000] [--seconds S] [--json]
//! cargo run --release --example bench -- --cell engine-instructions [--cycles 300]
//!     [--acquisitions 400] [--permits 4] [--concurrency 8] [--json]
//! cargo run --release --example bench --features tokio -- --cell connections
//!     [--load async-semaphore,blocking-threads,mixed-100-names] [--load-scale F] [--json]
//! cargo run --release --example bench --features tokio -- --cell idle-load [--waiters 700]
//!     [--seconds 10] [--json]
//! cargo run --release --example bench --features tokio -- --cell loss-notice
//!     [--impl ours,ours-async] [--trials N] [--expire-ms E] [--json]
//! ```
//!
//! Without `--url` (or `REDIS_URL`) and with nothing on the default port, the bench starts a
//! private `redis-server` for the run (`support/mod.rs`).
//!
//! # `loop` cells (the default `--cell`)
//!
//! For each impl, concurrency C and hold D: C threads, each with its own lock handle on one
//! shared name, loop acquire → hold D → release for S seconds (the shape of python-redis-lock's
//! `examples/bench.py`). `polling` is the common recipe this crate replaces: `SET NX PX`, sleep
//! 100 ms and retry, with an owner-checked Lua release.
//!
//! The round trip (`rtt_p50_us`) is measured inside each cell by the workers themselves: every
//! 8th loop, outside the lock, one `PING` on a plain connection. A shared machine's latency
//! drifts from second to second, so a figure taken before the cell would not be comparable.
//! The table's `x_rtt` is the cell's figure as a multiple of it: the cycle p50 for one thread
//! (target ≤ 2.2 on one server, ≤ 3 on `--quorum`), else the handoff p50 (target ≤ 2 at
//! hold 0).
//!
//! # `--cluster`: the same cells on a Redis Cluster (feature `cluster`)
//!
//! The bench starts a Redis Cluster of its own from `redis-server` (`support/deployments.rs`):
//! 6 nodes on free loopback ports (each with its bus port, + 10000, free too), each with
//! `--cluster-enabled yes --cluster-config-file <file in a fresh temp folder>
//! --cluster-node-timeout 2000 --save "" --appendonly no`, formed by
//! `redis-cli --cluster create .. --cluster-replicas 1 --cluster-yes` into 3 primaries with one
//! replica each (`--cluster-replicas 0`: 3 primaries alone, to tell what replication costs the
//! primaries on a small machine from what routing costs the client). It waits for `cluster_state:ok` on every node and every replica's link to be up,
//! and kills the nodes and removes the folder when it ends, also on an error (not on a signal
//! such as Ctrl-C). The locks are built on a `ClusterClient` seeded with one node; a lock named
//! `n` lives in `lock:{n}`. The `PING`s go to the primary that serves that key's slot (found with
//! `CLUSTER KEYSLOT` and `CLUSTER SLOTS`), so the RTT is the one the lock pays. `--cluster` runs
//! the `loop`, `names`, `wait1`, `semaphore` and `rwlock` cells (ours only); `loop` runs
//! `ours`, `ours-async` and `ours-fair` only
//! (`polling`'s keys and connection are for one server). Every line says `"backend":"cluster"` (`"server"` without
//! `--cluster`). A build without the feature refuses `--cluster` and says how to rebuild.
//!
//! # `--quorum N`: the `loop` cells on a Redlock quorum
//!
//! The bench starts N ≥ 3 independent private `redis-server`s (`support/deployments.rs`: free
//! loopback ports, `--save "" --appendonly no`, files in a fresh temp folder; killed and the
//! folder removed when the bench ends, also on an error, not on a signal such as Ctrl-C) and
//! runs the `loop` cells on them for two impls, both with a 10 s lock expiry:
//!
//! - `ours`: `Lock::builder(&Quorum::new(clients)?, name).expire(10 s)`, with `Quorum`'s
//!   default 100 ms server timeout. Waiters block in `BLPOP` on one server; the release pushes
//!   the signal on every server.
//! - `redlock-polling`: Redlock as redsync (Go) does it with its defaults, written in this
//!   file (`Redlock`). A try sends `SET lock:<name> <16 random bytes, hex> NX PX 10000` to
//!   every server at once (one connection per server, all sent before any reply is read) and
//!   reads each reply within 100 ms of the send (a server past that counts as no, and its
//!   connection is replaced). The try wins if a majority said OK and the validity, 10 s − the
//!   try's elapsed time − (1 % of 10 s + 2 ms), is above zero; otherwise it releases on every
//!   server. A `Lock()` call makes up to 32 tries, the first at once, each retry after a
//!   random pause of 50–250 ms (uniform, whole milliseconds). The release is the owner-checked
//!   Lua `DEL` of `polling` (`EVALSHA`, loaded on each connection) on every server. When all
//!   32 tries fail (redsync's `ErrFailed`) the thread calls `Lock()` again, as a caller that
//!   needs the lock would; the line's `gave_up` counts how often.
//!
//! The `PING`s go to the first server: every figure is a multiple of ONE server's round trip.
//! The uncontended cycle (C=1, hold 0: one fan-out to take, one to release) targets
//! ≤ 3 × RTT for `ours`. Lines say `"backend":"quorum"` and `"servers":N` (no `servers` field
//! elsewhere); `redlock-polling` lines also carry `gave_up`. `--quorum` runs the `loop` cells
//! only, takes neither `--url` nor `--cluster`, and without `--impl` runs
//! `ours,redlock-polling` (`polling` is for one server, `redlock-polling` for a quorum only;
//! `ours-async` runs there too).
//!
//! To reproduce the quorum figures, and the single-server uncontended cycle next to them:
//!
//! ```text
//! cargo run --release --example bench -- --quorum 5 --impl ours,redlock-polling --concurrency 1,6 --hold-ms 0,10
//! cargo run --release --example bench -- --cell loop --impl ours --concurrency 1 --hold-ms 0
//! ```
//!
//! # `--impl ours-async` and `--impl rslock`: async contenders (features `tokio`, `bench-rslock`)
//!
//! The same `loop` cells with C tokio tasks instead of C threads, all on one multi-thread
//! runtime (one for the whole run, one worker per core). `ours-async`: each task has its own
//! `aio::Lock` (expiry 10 s) and loops `lock().await` → hold (`tokio::time::sleep`, which
//! rounds up to the next millisecond) → `unlock().await` on the guard. `rslock`: the `rslock`
//! crate (0.10), the common async Redis lock in Rust, which polls: each task has its own
//! `LockManager` on the server (a connection of its own, as separate services would) and loops
//! `acquire(key, 10 s).await` → hold → `guard.release().await`, with rslock's defaults
//! (`acquire` calls `lock()` until it wins; a `lock()` makes 3 tries with a random pause of
//! 0–200 ms between them). A task's `PING`s are awaited on a multiplexed connection, so that
//! its figures are multiples of a round trip through the client stack its requests take. Both
//! run on one server (`rslock` only there; `ours-async` also on `--cluster` and `--quorum`) and
//! in the `loop` cells only. A build without the feature refuses the impl and says how to
//! rebuild.
//!
//! To reproduce the async figures next to the blocking ones, and the rslock comparison:
//!
//! ```text
//! cargo run --release --example bench --features tokio -- --impl ours,ours-async --concurrency 1,6 --hold-ms 0,10
//! cargo run --release --example bench --features bench-rslock -- --impl ours-async,rslock,polling --concurrency 6 --hold-ms 10
//! ```
//!
//! # `scale` cell: 10,000 tasks on 100 names in one process (feature `tokio`)
//!
//! For each hold D (`--hold-ms`): `--tasks` tasks (default 10000), task i on the name
//! i mod `--names` (default 100), each with its own `aio::Lock`, all on the bench's runtime,
//! each looping `lock().await` → hold D → `unlock().await` until `--seconds` have passed and
//! it has had its lock at least once. Meanwhile the bench, on a plain connection of its own,
//! looks every 100 ms: one `PING` (the RTT), `CLIENT LIST` (the server's clients less that
//! connection: on the bench's private server, this process's connections) and `VmRSS` in
//! /proc/self/status. Reported: `connections`, the most seen while the tasks ran, against the
//! target names + 8 (`connections_target`, `meets_target`); `connections_before` (before the
//! tasks were spawned) and `connections_after` (100 ms after the last one ended);
//! `acquisitions_per_s`; `handoff_p50_us` / `handoff_p99_us` (from a release to the next
//! acquisition of the same name) and `handoff_p50_rtt`; `min` (the fewest acquisitions a task
//! had); `rss_kib` (the most seen while the tasks ran), `rss_before_kib` and their difference,
//! `rss_increase_kib`. One server only (it counts that server's clients); run it against the
//! private server, or a server no one else uses.
//!
//! ```text
//! cargo run --release --example bench --features tokio -- --cell scale --hold-ms 0
//! ```
//!
//! # `engine-cost` cells: a queue-engine script's server time
//!
//! For each `--holders` count H (default 0, 100, 1000, 10000): a semaphore of H + 1 permits
//! whose H holders (1 permit each, an hour's lease) are written straight into its keys, and
//! one handle looping `try_acquire` → `release` for `--seconds`. Then for each `--waiters`
//! count W (default 10000): a semaphore of 1 permit, held, with W waiters written into its
//! queue (live for an hour), and one handle looping `try_acquire` (refused: a try never
//! passes a waiter). `CONFIG RESETSTAT` before, `INFO commandstats` after: `calls` and
//! `script_us_per_call` are the server's count and time of the cell's `EVALSHA`s. The cycle
//! percentiles and `rtt_p50_us` are the client's (a `PING` every 8th cycle, which waits behind
//! the scripts on a busy server). One server only; it takes `CONFIG` and `INFO`.
//!
//! ```text
//! cargo run --release --example bench -- --cell engine-cost
//! ```
//!
//! # `engine-instructions` cell: the server's instructions per queue hand-off
//!
//! Time moves with the machine's other load; instructions do not. The cell
//! (`support/instruction_cells.rs`) starts a `redis-server` of its own (the one on PATH, as
//! the private servers; on a free loopback port, `--save "" --appendonly no`, and `--hz 1` so
//! that serverCron's own instructions stay low) under `valgrind --tool=callgrind
//! --callgrind-out-file=<fresh temp folder>/cg.%p`, waits until it answers `PING` (valgrind
//! takes seconds to start), and stops it and removes the folder at the end, also on an error
//! (not on a signal such as Ctrl-C). It needs valgrind (`sudo apt-get install -y valgrind`),
//! and takes no `--url`, `--cluster` or `--quorum`. Per phase: `INFO commandstats`,
//! `callgrind_control -z <pid>` (zero), the phase, `callgrind_control -d <pid>` (dump), the
//! dump's `Ir` total (its `summary:` line, else `totals:`: every thread of the server, from
//! the zero to the dump) and `INFO commandstats` again. The phases, in this order, through
//! the library's public API (handles as the `semaphore` cell builds them, with a 60 s I/O
//! timeout and a 2 s heartbeat, since callgrind slows the server about 20–50 times and, at
//! `--hz 1`, an idle server fires a `BLPOP` timeout up to 1 s late):
//!
//! - `uncontended`: one handle, `--cycles` K (default 300) × acquire one of `--permits`
//!   (default 4) → release, after one untimed cycle that loads the scripts;
//! - `contended` (per `--concurrency` C, default 8): C threads, each with a handle of its own
//!   on one semaphore of `--permits`, loop acquire → release (hold 0) until `--acquisitions`
//!   (default 400) in all (each finishes the acquire it is in: `units` is the real count),
//!   after 5 untimed turns each;
//! - `plain-lock`: one plain `Lock` (10 s expiry), K × acquire → release, for scale;
//! - `idle`: nothing, for as long as the first `contended` phase took: the server's own
//!   background (serverCron);
//! - `idle-waiter`: the same time with one waiter queued on a held one-permit semaphore: its
//!   process's hub in `BLPOP` and its heartbeats.
//!
//! Each line has the raw `ir`, `seconds`, the calls of `evalsha` and `eval` (the hub's
//! heartbeat is sent as `EVAL`), `blpop` and `other` (every other command, including the
//! commands the scripts run, which Redis 7 counts; not the cell's own `INFO`), all the calls
//! by command in `--json`'s `calls`, and per `unit` (`cycle`, `acquisition` or `second`):
//! `ir_per_unit`, `scripts_per_unit` (`EVALSHA` + `EVAL`), `blpops_per_unit`, `ir_per_script`
//! and `per_uncontended` (`ir_per_unit` ÷ the uncontended cycle's). Nothing is subtracted:
//! the background a phase shares with `idle` is in its figures. The cell takes minutes.
//!
//! ```text
//! cargo run --release --example bench -- --cell engine-instructions
//! ```
//!
//! # `connections` and `idle-load` cells: what waiting costs the server (feature `tokio`)
//!
//! Both cells (`support/load_cells.rs`) take the primitive first with a holder of their own
//! (a blocking handle, a 10-minute lease without renewal), start the waiters, each with a
//! handle of its own and all with one `CancelToken`, and wait until every queue-engine waiter
//! is in its queue (`ZCARD` of the name's `queue` key, on the bench's own connection: at most
//! 2 minutes, else an error). At the end they cancel the waiters, join every thread and task,
//! release the holders and delete every key of their names (`bench:connections:*`,
//! `bench:idle-load:*`), also after an error. One server only (they read its `INFO`); run them
//! against the private server, or a server no one else uses.
//!
//! `connections`: for each `--load` (default all three, one line each, named in `load`):
//!
//! - `async-semaphore`: 2,000 tokio tasks on one `aio::Semaphore` of 1 permit;
//! - `blocking-threads`: 200 threads on one `Semaphore` of 1 permit;
//! - `mixed-100-names`: 1,000 threads and 5,000 tasks on 100 names, name n a plain `Lock`
//!   (n mod 3 = 0), a fair `Lock` (`.fair(true)`, n mod 3 = 1) or a `Semaphore` of 1 permit
//!   (n mod 3 = 2); thread i and task i wait on name i mod 100.
//!
//! Threads have 256 KiB stacks; tasks run on the bench's runtime (a worker per core).
//! `--load-scale F` multiplies tasks, threads and names (rounded; at least 1 each, and 3 names
//! for the mixed load), for a smoke test. Before a load the bench waits until the server's
//! `connected_clients` (`INFO clients`) has stayed the same for 1.5 s, and reads it
//! (`connections_before`, the bench's own connection and the library's idle pooled ones
//! included: a load may reuse those, so for one load's figure alone run it alone). Once the
//! waiters are all queued (`setup_ms`, from the first one started; plain-lock waiters are not
//! in a queue, and have had that time to settle), it reads `INFO clients` every 100 ms for 2 s:
//! `connections` is the most `connected_clients` seen, less before (`connections_least` the
//! fewest: a server whose waits are ended by `CLIENT KILL` sees each waiter's connection close
//! and open again at each heartbeat), against the engine-at-scale issue's target
//! (`connections_target`: 20, 16 for the mixed load; `meets_target`); `blocked_clients` is the
//! most blocked (in `BLPOP`), less before. Then: `teardown_ms` (the cancel to every waiter
//! joined), `cancelled` (waiters that ended cancelled: all of them, as none can have a turn)
//! and `connections_after` (100 ms after, less before).
//!
//! `idle-load`: for each `--waiters` count W (default 700), W tokio tasks wait on one
//! `aio::Semaphore` of 1 permit held by the holder. Once all W are queued: `CONFIG RESETSTAT`,
//! `--seconds` (default 10 for this cell) of nothing, `INFO commandstats`. Reported, per
//! second of that time: `scripts_per_s` (`EVALSHA` + `EVAL` calls, and their `_RO` forms),
//! `commands_per_s` (every `cmdstat_` entry's calls summed, less the bench's own `CONFIG` and
//! `INFO`) and `blpops_per_s`; `calls` has each command's count. Redis (7.0 and later) counts
//! the commands that scripts call in `INFO commandstats` too, so `commands_per_s` already
//! includes the commands run inside the scripts, and each script call counts once more as its
//! `EVALSHA`. Targets (`scripts_target`, `commands_target`, `meets_target`): at most 10
//! scripts and 300 commands a second, for 700 waiters.
//!
//! ```text
//! cargo run --release --example bench --features tokio -- --cell connections
//! cargo run --release --example bench --features tokio -- --cell idle-load
//! ```
//!
//! # `names` cell: many names, no contention
//!
//! C threads (`--concurrency`, default 6 for this cell) each loop acquire → release on a name
//! of its own for S seconds; on a cluster the names fall in different slots, and so mostly on
//! different primaries (`nodes` says on how many). Each thread pings the server that holds its
//! own key. Reported: `acquisitions_per_s` (all threads), `cycle_p50_us` and `cycle_p99_us`,
//! `rtt_p50_us`, and the cycle as RTT multiples (`cycle_p50_rtt`, `cycle_p99_rtt`). Run it
//! with and without `--cluster` to compare one server with three primaries.
//!
//! # `wait1` cell: what `replicas(1, 100 ms)` costs
//!
//! One thread alternates two handles on one name, one built with
//! `.replicas(1, Duration::from_millis(100))` (each acquire and release is followed by
//! `WAIT 1 100` in the same pipeline, so the client pays the replica's acknowledgement but no
//! round trip of its own) and one without, for S seconds, each cycle an
//! acquire + release. `WAIT` needs a replica: on `--cluster` it is the key's primary's; without
//! `--cluster` the cell starts a private primary + `--replicaof` replica pair for itself (also
//! when `--url` is given: the server there may have no replica). Reported: `cycle_p50_us`
//! (without), `wait_cycle_p50_us` (with), `extra_us` (their difference) and `extra_rtt` (it as
//! an RTT multiple).
//!
//! To reproduce the cluster and single-server figures of these cells:
//!
//! ```text
//! cargo run --release --example bench --features cluster -- --cluster --cell loop,names,wait1
//! cargo run --release --example bench -- --cell loop,names,wait1 --impl ours
//! ```
//!
//! # `crash` cell: lateness after a crashed holder's expiry
//!
//! `--trials` trials (default 20), each on a fresh lock name, trial i after a pause of
//! `frac(i × 0.618…)` of a server tick (1/hz; see `overshoot` for why):
//!
//! 1. A holder in a child process (this binary re-executed with the hidden environment
//!    variable `REDIS_LOCK_BENCH_ROLE`; for `python`, a `fork` of the python runner) takes the
//!    lock with expiry E (`--expire-ms`, default 300) and prints `held`.
//! 2. The bench at once sends `PTTL lock:<name>` and takes the key's expiry instant as
//!    *the instant just before PTTL was sent + the PTTL reply*. That is at or before the real
//!    instant, so lateness is overstated rather than understated, by at most the PTTL round trip
//!    (reported as `pttl_rtt_max_us`) plus Redis's 1 ms rounding.
//! 3. The holder is SIGKILLed: it never releases, nothing signals the waiters.
//! 4. A waiter in the bench process arrives at a spread point of the time left before the
//!    expiry (fraction `0.9 × frac(i × 0.618…)` for trial i: 0 for the first trial, then spread
//!    evenly and reproducibly). A real waiter comes at any moment while the dead holder's key is
//!    still live, and an implementation whose wait is not bound to the expiry is late by an
//!    amount that depends on that moment, so a fixed arrival would hide it. Ours waits with
//!    `Lock::builder(..).expire(E).build()` + `acquire_timeout(10 s)`; `polling` with its
//!    loop; python-redis-lock with `Lock(expire=E).acquire()` (it refuses a timeout longer
//!    than the expiry, so its `BLPOP` is bounded by E: waiting in `BLPOP(E)` rounds).
//! 5. lateness = the instant the acquire returned − the expiry instant.
//!
//! Reported: `lateness_p50_us`, `lateness_p99_us`, `lateness_max_us`, `pttl_rtt_max_us`, against
//! the target p99 ≤ 10 ms (`target_p99_us`, `meets_target`).
//!
//! # `overshoot` cell: how far past its timeout does a failing `acquire_timeout(d)` return?
//!
//! For each d in `--timeout-ms` (default 50,300,1000): one handle takes the lock without an
//! expiry and keeps it; another handle calls `acquire_timeout(d)` `--trials` times, trial i
//! after a pause of `frac(i × 0.618…)` of a server tick (1/hz) so that the trials do not lock
//! onto the ticks on which Redis fires `BLPOP` timeouts (python:
//! `acquire(timeout=d)`, only for whole seconds, see below). overshoot = elapsed − d; reported
//! as `overshoot_p50_us`, `overshoot_p99_us`, `overshoot_max_us`, target p99 ≤ 10 ms.
//!
//! # `--impl python`
//!
//! The `crash` and `overshoot` cells run through python-redis-lock (`python3`, or `$PYTHON`,
//! with `redis` and `python-redis-lock` importable) in a child process
//! (`examples/support/pylock_cells.py`) that runs the same trials on the same server and prints
//! the raw samples; the percentiles are computed here, by the same code. python-redis-lock
//! takes whole seconds: E is rounded up to whole seconds (1 s for the default 300 ms, said in
//! `note`), and a timeout that is not a whole number of seconds is not measured: its line has
//! `"trials":0` and a `note` (`acquire(timeout=0.3)` truncates the timeout to 0, which means
//! none: against a lock held without expiry it never returns).
//!
//! Every `crash`/`overshoot` line also says `server_hz` (`CONFIG GET hz`): Redis checks
//! blocked clients' timeouts in its event loop, which, idle, wakes `hz` times a second, so a
//! `BLPOP` timeout may fire up to 1/hz late. The figures are meant for a server with default
//! settings (hz 10), which is what the bench starts when no server answers on the default port.
//!
//! To reproduce the figures in the docs (about 2 minutes in all: per impl, `crash` takes about
//! 20 × (E + lateness + a process start), `overshoot` about 20 × (50 + 300 + 1000 ms); python's
//! `crash` runs at E = 1 s):
//!
//! ```text
//! cargo run --release --example bench -- --cell crash,overshoot --impl ours,polling,python
//! ```
//!
//! `--cell crash --impl ours` alone takes about 10 s; `--trials` trades time for a steadier p99
//! (up to 51 trials, p99 is the largest sample).
//!
//! # `semaphore` cells: contenders for the permits of one semaphore
//!
//! For each impl, concurrency C (default 1, 8, 32) and hold D: C contenders, each with a
//! handle of its own on one semaphore of `--permits` P permits (default 4), loop acquire one
//! permit → hold D → release for S seconds. Reported: `total`, `min` and `max` (the fewest and
//! most acquisitions one contender had), `spread_pct` (the contender farthest from the mean
//! count, in % of the mean), `busy_pct` (the time permits were held, in % of wall time × P),
//! `cycle_p50_us` (C = 1: acquire + release), `handoff_p50_us` / `handoff_p99_us` (C > P: from
//! the latest release by any contender to an acquisition), `rtt_p50_us` and `x_rtt` (the cycle,
//! else the hand-off p50, as an RTT multiple), and `most_holders`: the most contenders that
//! held at once by their own count (each counts itself in once its acquire has returned and
//! out before it calls release, so that count never exceeds the truth; more than P would be a
//! bug). `meets_target`: C = 1, the cycle ≤ 2.5 × RTT; C > P with D > 0, `busy_pct` ≥ 97 and
//! `spread_pct` ≤ 20; C > P with D = 0, the hand-off p50 ≤ 2 × RTT; else `null`.
//!
//! `distributed-lock` is the `distributed-lock-redis` crate (0.2, the only other Rust crate
//! with a Redis semaphore and read-write lock; async on tokio and fred; feature
//! `bench-distributed-lock`): each contender is a tokio task with a `RedisLockProvider` of its
//! own (the crate's defaults: 30 s expiry, extended every 10 s) and loops
//! `acquire(None).await` → hold → `release().await`. Its `acquire` polls: a try, then a sleep
//! of 10 ms doubling up to 200 ms. Its `PING`s are awaited on a multiplexed connection, as
//! `rslock`'s are. One server only.
//!
//! # `rwlock` cells: readers and writers on one read-write lock
//!
//! For each impl and hold D: `--readers` R (default 6) and `--writers` W (default 2)
//! contenders, each with a handle of its own on one read-write lock, loop acquire (a read
//! hold, or a write hold) → hold D → release for S seconds. Reported per role (`reads`,
//! `writes`): contenders, `total`, `min`, `max`, and the wait from asking to having
//! (`wait_p50_us`, `wait_max_us`): a starved role shows as a tiny total and a wait as long as
//! the cell. `clashes` counts holds that overlapped one they exclude (a writer with anyone),
//! counted as `most_holders` is: never any. `distributed-lock`: `acquire_write(None)` polls
//! (a try, then a sleep of 50 ms doubling up to 1 s); its `acquire_read(None)` does not wait
//! at all (it fails with `Timeout` while a writer holds or waits), so a reader that needs the
//! lock tries again after 10 ms doubling up to 200 ms, the crate's own semaphore's pauses.
//!
//! `ours` takes `Semaphore::new(&client, name, P)` and `RwLock::new(&client, name)` per
//! contender (a thread; the defaults: 30 s expiry, renewed) and releases with `release()` /
//! `unlock()` on the permit or guard; `ours-async` (feature `tokio`) the same with
//! `aio::Semaphore` and `aio::RwLock` in tokio tasks, its `PING`s awaited as in the `loop`
//! cells. `--impl ours-fair` runs the `loop` cells on
//! `Lock::builder(..).fair(true)` (with the cells' 10 s expiry), next to `ours`.
//!
//! # The queue primitives' fault cells: `permit-crash`, `dead-waiter`, `fifo`
//!
//! Ours only (`--impl` does not apply), one server only, each trial on a fresh one-permit
//! semaphore; the other processes are this binary re-executed in a role
//! (`support/queue_faults.rs`).
//!
//! - `permit-crash`: the `crash` cell for a permit. A holder process takes the permit with
//!   expiry E (`--expire-ms`, default 300; renewal off) and prints `held`; the bench reads the
//!   lease's expiry (`TIME` and the holder's score in `semaphore:{name}:holders`, in one
//!   transaction: the instant is known to within that round trip, `pttl_rtt_max_us`), SIGKILLs
//!   the holder, and a waiter arriving at the same spread points as `crash`'s times
//!   `try_acquire_for(10 s)`. lateness = grant − expiry; target p99 ≤ 10 ms.
//! - `dead-waiter`: the bench holds the permit; a waiter process queues, then a waiter in the
//!   bench behind it; the process is SIGKILLed and the bench releases at once, so the grant
//!   goes to the dead waiter. Reported: `delay` (the kill to the live waiter's grant) and
//!   `after_lapse` (the grant − the dead waiter's lapse instant, its score in
//!   `semaphore:{name}:beats` read after the kill); target: `after_lapse` ≤ one heartbeat
//!   interval (1 s, the default). Each trial takes about a lapse window (2 s).
//! - `fifo`: per round (`--trials`), the bench holds the permit while 3 processes of 10
//!   waiters each arrive interleaved 1 ms apart (process p's waiter j at 3j + p steps after a
//!   common start on the wall clock, each with a handle of its own), then releases; each
//!   waiter prints its arrival (the wall clock just before `acquire()`) and grant. Counted:
//!   `inversions` (pairs served in the other order than they arrived) and
//!   `inversions_beyond_rtt` (of those, pairs that arrived more than one RTT apart; target 0),
//!   with `widest_inversion_us`; and `queue_inversions`, pairs served in the other order than
//!   their tickets (each waiter reports the id it held under; the bench read the queue before
//!   letting go): the engine's order, apart from the clients' timing. Each waiter's handle
//!   makes one request (`available()`) before it arrives, so that no connect lies between its
//!   arrival and its ticket.
//!
//! # `election` cell: leader election
//!
//! Ours only, one server only (`support/election_cells.rs`). Per trial (`--trials`), on a
//! fresh election: a leader process (this binary re-executed) campaigns with a lease of
//! `--expire-ms` (default 300, renewal off) and prints `leads`; the bench reads the lease's end
//! (`TIME` and the leader's score in `election:{name}:holders`, in one transaction), SIGKILLs
//! the leader, and a standby in the bench, already made, campaigns: `takeover` = when it
//! leads − the lease's end (target p99 ≤ 10 ms). Then a watch on a client of its own (so a
//! hub of its own, as another process would have) sees the standby campaign again: `seen` =
//! from the campaign's start to the watch reporting it, on a thread of its own. The campaign
//! is two round trips (the grant, then the announcement, which is the change), so the change
//! ran on the server about 1.5 round trips after the start, and `seen_after_change_x_rtt` is
//! (`seen` p50 − 1.5 × RTT) / RTT (target ≤ 2). Last, 1,000 watches of one election in the bench
//! process: `watch_connections`, the server connections they added.
//!
//! # `loss-notice` cell: how soon a holder is told that its lock was taken away
//!
//! `--trials` trials (default 20) per impl, each on a fresh name (`support/notice_cells.rs`).
//! A holder takes the lock with expiry E (`--expire-ms`, default 300) and auto-renewal, so a
//! renewal runs every interval I = 2E/3, and takes its guard's `lost_token()`. Trial i then
//! waits `frac(i × 0.618…)` of I (the notice comes with the next renewal, so a fixed phase
//! would time one distance to it only), and another handle resets the lock (`Lock::reset`).
//! notice = from the reset's reply to the holder being told: `ours` looks at the token every
//! 50 µs (the figure's resolution); `ours-async` (feature `tokio`) awaits `when_lost()` on the
//! bench's runtime. Reported: `notice_p50_us`, `notice_p99_us`, `notice_max_us`, against the
//! target p99 ≤ I + 10 ms (`target_p99_us`, `meets_target`), and `rtt_p50_us`. Other impls
//! have no notice and are skipped. One server only; about `trials` × (I + E) per impl.
//!
//! ```text
//! cargo run --release --example bench --features tokio -- --cell loss-notice --impl ours,ours-async
//! ```
//!
//! # `handoff-path` cell: where a plain lock's hand-off spends its time
//!
//! Feature `tracing`; `ours` (threads) only (`support/handoff_cells.rs`). C threads
//! (`--concurrency`, default 6) loop acquire → hold D → release on one name for S seconds, as
//! the `loop` cell does. The library marks two steps of each hand-off with `trace` events
//! (target `redis_lock::handoff`): the hub's `BLPOP` bringing the release's signal (`popped`,
//! on the hub's thread, with the carried try's reply) and the waiter running again (`woken`,
//! on its thread); a subscriber of the bench's own timestamps them. For each hand-off to a
//! woken waiter, p50/p99 in µs of: `release` (the release call, to its reply), `pop` (the
//! release call to the hub's pop), `wake` (the pop to the waiter running), `acquired` (the
//! waiter running to its acquire returning), and `handoff` (the release call to the acquire
//! returning, as the `loop` cell times it). `woken%` is the share of hand-offs that went to a
//! woken waiter; the rest went to a contender that took the lock with a try of its own.
//!
//! ```text
//! cargo run --release --example bench --features tracing -- --cell handoff-path --concurrency 6 --hold-ms 0,10
//! ```
//!
//! Add `--json` for one JSON object per line; every line but the `loop` lines carries a
//! `"cell"` field.

#[cfg(feature = "tokio")]
#[path = "support/async_cells.rs"]
mod async_cells;
#[path = "support/deployments.rs"]
mod deployments;
#[cfg(feature = "bench-distributed-lock")]
#[path = "support/dlock_cells.rs"]
mod dlock_cells;
#[path = "support/election_cells.rs"]
mod election_cells;
#[path = "support/engine_cells.rs"]
mod engine_cells;
#[cfg(feature = "tracing")]
#[path = "support/handoff_cells.rs"]
mod handoff_cells;
#[path = "support/instruction_cells.rs"]
mod instruction_cells;
#[cfg(feature = "tokio")]
#[path = "support/load_cells.rs"]
mod load_cells;
#[path = "support/notice_cells.rs"]
mod notice_cells;
#[path = "support/queue_cells.rs"]
mod queue_cells;
#[path = "support/queue_faults.rs"]
mod queue_faults;
mod support;

use std::future::{ready, Future};
use std::io::{BufRead, BufReader, Write};
use std::pin::pin;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use redis_blpop_lock::{Backend, Lock, LockBuilder, Quorum};

use deployments::Deployment;

const POLL_INTERVAL: Duration = Duration::from_millis(100);
const LOCK_EXPIRE: Duration = Duration::from_secs(10);
/// Every this many loops a worker times one `PING`.
const PING_EVERY: u64 = 8;
const WARM_UP_PINGS: usize = 2000;
const POLLING_RELEASE: &str = r#"
if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end
return 0
"#;
/// Set (to an impl's name) in a `crash` cell's holder child: this binary re-executed.
const ROLE_ENV: &str = "REDIS_LOCK_BENCH_ROLE";
/// The `crash` cell's waiter: `acquire_timeout` of this.
const WAITER_TIMEOUT: Duration = Duration::from_secs(10);
/// The target for both `crash` lateness and `overshoot`: p99 at most this, in microseconds.
const TARGET_P99_US: i64 = 10_000;
/// Spreads the `crash` waiters' arrival: trial i arrives at fraction `frac(i × this)`.
const GOLDEN: f64 = 0.618_033_988_749_895;
/// The `crash` and `overshoot` cells for python-redis-lock, run with `python3 -c`.
const PYTHON_CELLS: &str = include_str!("support/pylock_cells.py");
/// The `wait1` cell's `replicas(1, this)`.
const WAIT_TIMEOUT: Duration = Duration::from_millis(100);
/// How long `redlock-polling` gives one server to answer, from when its request went to all:
/// the same as `Quorum`'s default `server_timeout`, so both impls count a slow server alike.
const REDLOCK_SERVER_TIMEOUT: Duration = Duration::from_millis(100);
/// redsync's defaults: tries per `Lock()` call, and the random pause before each retry.
const REDLOCK_TRIES: usize = 32;
const REDLOCK_RETRY_MIN_MS: u64 = 50;
const REDLOCK_RETRY_MAX_MS: u64 = 250;

struct Options {
    url: Option<String>,
    /// Run on a Redis Cluster the bench starts, instead of one server.
    cluster: bool,
    /// Replicas per primary of the `--cluster` cluster.
    cluster_replicas: usize,
    /// Run on this many independent servers the bench starts, as a Redlock quorum.
    quorum: Option<usize>,
    seconds: f64,
    /// Whether `--seconds` was given (`idle-load` has a default of its own).
    seconds_given: bool,
    /// `None`: each cell's default (`loop` 1,2,6; `names` 6).
    concurrency: Option<Vec<usize>>,
    hold_ms: Vec<u64>,
    impls: Vec<Impl>,
    json: bool,
    cells: Vec<CellKind>,
    trials: usize,
    expire_ms: u64,
    timeout_ms: Vec<u64>,
    /// The `scale` cell's tasks, and the names they share.
    tasks: usize,
    names: usize,
    /// The `semaphore` cell's permits.
    permits: u32,
    /// The `rwlock` cell's contenders of each kind.
    readers: usize,
    writers: usize,
    /// The `engine-cost` cells' holders, and (on a full semaphore) waiters; `idle-load`'s
    /// waiters too. `None`: each cell's default (`engine-cost` 10000, `idle-load` 700).
    holders: Vec<u64>,
    waiters: Option<Vec<u64>>,
    /// The `engine-instructions` cell's cycles per uncontended phase, and acquisitions per
    /// contended phase.
    cycles: u64,
    acquisitions: u64,
    /// The `connections` cell's loads, and what their sizes are multiplied by.
    #[cfg(feature = "tokio")]
    loads: Vec<load_cells::Load>,
    #[cfg(feature = "tokio")]
    load_scale: f64,
}

#[derive(Clone, Copy, PartialEq)]
enum CellKind {
    /// The acquire → hold → release loops (the cells the bench always had).
    Loop,
    /// Lateness after a crashed holder's expiry.
    Crash,
    /// How far past its timeout a failing `acquire_timeout` returns.
    Overshoot,
    /// Every thread loops on a lock of its own: many names, no contention.
    Names,
    /// The uncontended cycle with `replicas(1, ..)` (`WAIT 1`) against the same without.
    Wait1,
    /// Many async tasks waiting on a few names in this one process (feature `tokio`).
    Scale,
    /// Contenders for the permits of one semaphore.
    Semaphore,
    /// Readers and writers on one read-write lock.
    RwLock,
    /// Lateness after a crashed holder's permit expired.
    PermitCrash,
    /// How long a SIGKILLed waiter holds up the one behind it.
    DeadWaiter,
    /// Grant order against arrival order across processes.
    Fifo,
    /// A queue-engine script's server time, with many holders or waiters.
    EngineCost,
    /// The server's instructions per hand-off, counted by callgrind on a server of its own.
    EngineInstructions,
    /// The server connections of many waiters in one process (feature `tokio`).
    Connections,
    /// The commands idle waiters cost the server (feature `tokio`).
    IdleLoad,
    /// A killed leader's takeover, a watch's delay and 1,000 watches' connections.
    Election,
    /// How soon a holder is told that its lock was reset under it.
    LossNotice,
    /// A plain lock's hand-off split into its steps (feature `tracing`).
    HandoffPath,
}

#[derive(Clone, Copy, PartialEq)]
enum Impl {
    Ours,
    Polling,
    /// python-redis-lock, in a python child process; `crash` and `overshoot` cells only.
    Python,
    /// Redlock as redsync does it, polling; `--quorum` loop cells only.
    RedlockPolling,
    /// The async API (`aio`) in tokio tasks; loop cells only (feature `tokio`).
    OursAsync,
    /// The `rslock` crate in tokio tasks; one server's loop cells only (feature `bench-rslock`).
    Rslock,
    /// Ours with `Lock::builder(..).fair(true)`: the queue engine's FIFO lock; loop cells only.
    OursFair,
    /// The `distributed-lock-redis` crate in tokio tasks; one server's `semaphore` and `rwlock`
    /// cells only (feature `bench-distributed-lock`).
    DistributedLock,
}

impl Impl {
    fn name(self) -> &'static str {
        match self {
            Impl::Ours => "ours",
            Impl::Polling => "polling",
            Impl::Python => "python",
            Impl::RedlockPolling => "redlock-polling",
            Impl::OursAsync => "ours-async",
            Impl::Rslock => "rslock",
            Impl::OursFair => "ours-fair",
            Impl::DistributedLock => "distributed-lock",
        }
    }
}

/// What one thread saw in one cell.
#[derive(Default)]
struct ThreadStats {
    acquisitions: u64,
    /// Microseconds from a release call to the next acquire returning (any thread's).
    handoffs: Vec<u64>,
    /// Microseconds for one acquire + release pair.
    cycles: Vec<u64>,
    /// Microseconds from asking for the lock to having it.
    waits: Vec<u64>,
    /// Microseconds for one `PING`.
    pings: Vec<u64>,
    held: Duration,
    /// `redlock-polling`: how many times all its tries failed and it started over.
    gave_up: u64,
}

struct Cell {
    backend: &'static str,
    /// How many servers the quorum has (`--quorum` only).
    servers: Option<usize>,
    imp: Impl,
    concurrency: usize,
    hold_ms: u64,
    seconds: f64,
    total: u64,
    min: u64,
    max: u64,
    handoff_p50_us: Option<u64>,
    handoff_p99_us: Option<u64>,
    cycle_p50_us: Option<u64>,
    busy_pct: f64,
    rtt_p50_us: u64,
    /// `redlock-polling` only: see [`ThreadStats::gave_up`].
    gave_up: Option<u64>,
}

fn main() {
    if let Ok(role) = std::env::var(ROLE_ENV) {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let done = if role.starts_with("queue-") {
            queue_faults::child(&role, &args)
        } else if role == "election-leader" {
            election_cells::child(&args)
        } else {
            crash_holder(&role, std::env::args().skip(1))
        };
        if let Err(e) = done {
            eprintln!("bench holder: {e}");
            std::process::exit(2);
        }
        return;
    }
    if let Err(e) = run() {
        eprintln!("bench: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let options = parse_args(std::env::args().skip(1))?;
    // That cell starts a server of its own: alone, it needs no other, nor the warm-up.
    if options
        .cells
        .iter()
        .all(|&kind| kind == CellKind::EngineInstructions)
    {
        return instruction_cells::run(&options);
    }
    // The servers the bench started: they stop when these are dropped, at the end of this
    // function, also on an error.
    let (place, _private, _deployment) = if let Some(n) = options.quorum {
        let (place, servers) = quorum_place(n)?;
        (place, None, Some(servers))
    } else if options.cluster {
        let (place, cluster) = cluster_place(options.cluster_replicas)?;
        (place, None, Some(cluster))
    } else {
        let (url, private) = support::redis_url(options.url.clone())?;
        (Place::server(url)?, private, None)
    };
    warm_up(&place)?;
    for &kind in &options.cells {
        match kind {
            CellKind::Loop => run_loop_cells(&place, &options)?,
            CellKind::Names => run_names(&place, &options)?,
            CellKind::Wait1 => run_wait1(&place, &options)?,
            #[cfg(feature = "tokio")]
            CellKind::Scale => async_cells::run_scale(&place, &options)?,
            #[cfg(not(feature = "tokio"))]
            CellKind::Scale => unreachable!("parse_args refuses it without the tokio feature"),
            #[cfg(feature = "tokio")]
            CellKind::Connections | CellKind::IdleLoad => {
                let Place::Server { client, .. } = &place else {
                    unreachable!("parse_args refuses these cells with --cluster or --quorum")
                };
                if kind == CellKind::Connections {
                    load_cells::run_connections(client, &options)?
                } else {
                    load_cells::run_idle_load(client, &options)?
                }
            }
            #[cfg(not(feature = "tokio"))]
            CellKind::Connections | CellKind::IdleLoad => {
                unreachable!("parse_args refuses them without the tokio feature")
            }
            CellKind::Semaphore => queue_cells::run_semaphore(&place, &options)?,
            #[cfg(feature = "tracing")]
            CellKind::HandoffPath => handoff_cells::run(&place, &options)?,
            #[cfg(not(feature = "tracing"))]
            CellKind::HandoffPath => {
                unreachable!("parse_args refuses it without the tracing feature")
            }
            CellKind::RwLock => queue_cells::run_rwlock(&place, &options)?,
            CellKind::EngineInstructions => instruction_cells::run(&options)?,
            CellKind::Crash
            | CellKind::Overshoot
            | CellKind::PermitCrash
            | CellKind::DeadWaiter
            | CellKind::Fifo
            | CellKind::EngineCost
            | CellKind::Election
            | CellKind::LossNotice => match &place {
                Place::Server { url, client } => match kind {
                    CellKind::Crash | CellKind::Overshoot => {
                        run_tail_cells(client, url, kind, &options)?
                    }
                    CellKind::EngineCost => engine_cells::run_engine_cost(client, &options)?,
                    CellKind::Election => {
                        election_cells::run(client, url, &options)?.print(options.json)
                    }
                    CellKind::LossNotice => notice_cells::run_loss_notice(client, &options)?,
                    _ => run_queue_faults(client, url, kind, &options)?,
                },
                Place::Quorum { .. } => {
                    unreachable!("parse_args refuses these cells with --quorum")
                }
                #[cfg(feature = "cluster")]
                Place::Cluster { .. } => {
                    unreachable!("parse_args refuses these cells with --cluster")
                }
            },
        }
    }
    Ok(())
}

/// Where the cells run: one server, the independent servers of a Redlock quorum, or the
/// Redis Cluster the bench started.
enum Place {
    Server {
        url: String,
        client: redis::Client,
    },
    Quorum {
        quorum: Quorum,
        /// Every server's URL; the `PING`s go to the first.
        urls: Vec<String>,
    },
    #[cfg(feature = "cluster")]
    Cluster {
        /// Boxed: a `ClusterClient` is several times the size of the other variant.
        client: Box<redis::cluster::ClusterClient>,
        /// A plain connection to one node, to ask which node serves a key.
        seed: redis::Client,
    },
}

impl Place {
    fn server(url: String) -> Result<Place, redis::RedisError> {
        let client = redis::Client::open(url.as_str())?;
        Ok(Place::Server { url, client })
    }

    /// `"server"`, `"quorum"` or `"cluster"`, the `backend` field of every line.
    fn backend(&self) -> &'static str {
        match self {
            Place::Server { .. } => "server",
            Place::Quorum { .. } => "quorum",
            #[cfg(feature = "cluster")]
            Place::Cluster { .. } => "cluster",
        }
    }

    /// What the locks are built on, for the blocking and the async API alike.
    fn store(&self) -> &dyn Backend {
        match self {
            Place::Server { client, .. } => client,
            Place::Quorum { quorum, .. } => quorum,
            #[cfg(feature = "cluster")]
            Place::Cluster { client, .. } => client.as_ref(),
        }
    }

    fn lock(&self, name: &str) -> LockBuilder {
        Lock::builder(self.store(), name)
    }

    /// How many servers a quorum has; `None` elsewhere.
    fn servers(&self) -> Option<usize> {
        match self {
            Place::Quorum { urls, .. } => Some(urls.len()),
            _ => None,
        }
    }

    /// The URL of the server that holds lock `name`'s key. The cells' `PING`s go there, so the
    /// RTT they report is the one the lock pays: on a cluster, the key's primary. Every server
    /// of a quorum holds the key: there, the first one, so the figures are multiples of one
    /// server's RTT.
    #[cfg_attr(
        not(feature = "cluster"),
        expect(unused_variables, reason = "one server holds every key")
    )]
    fn node_for(&self, name: &str) -> Result<String, String> {
        match self {
            Place::Server { url, .. } => Ok(url.clone()),
            Place::Quorum { urls, .. } => Ok(urls[0].clone()),
            #[cfg(feature = "cluster")]
            Place::Cluster { seed, .. } => {
                let mut conn = seed.get_connection().map_err(|e| e.to_string())?;
                // On a cluster the name is the key's hash tag (src/protocol/keys.rs).
                let primary = deployments::primary_for(&mut conn, &format!("lock:{{{name}}}"))?;
                Ok(format!("redis://{primary}/"))
            }
        }
    }

    /// A client for the server that holds lock `name`'s key (see `node_for`).
    fn node_client(&self, name: &str) -> Result<redis::Client, String> {
        redis::Client::open(self.node_for(name)?).map_err(|e| e.to_string())
    }

    /// A connection for a thread's `PING`s (see `node_for`).
    fn pinger(&self, name: &str) -> Result<Pinger, String> {
        self.node_client(name)?
            .get_connection()
            .map(Pinger::Blocking)
            .map_err(|e| e.to_string())
    }
}

/// Where a contender times its round trips. A thread: a plain connection. A task: a
/// multiplexed connection, awaited, so that its round trip goes through the client stack its
/// requests go through (tokio's I/O, the multiplexer's task), as a blocking `PING` does for a
/// thread.
enum Pinger {
    Blocking(redis::Connection),
    #[cfg(feature = "tokio")]
    Async(redis::aio::MultiplexedConnection),
}

impl Pinger {
    /// Microseconds for one `PING`.
    async fn ping(&mut self) -> redis::RedisResult<u64> {
        match self {
            Pinger::Blocking(conn) => ping(conn),
            #[cfg(feature = "tokio")]
            Pinger::Async(conn) => {
                let sent = Instant::now();
                let _: String = redis::cmd("PING").query_async(conn).await?;
                Ok(sent.elapsed().as_micros() as u64)
            }
        }
    }
}

/// Starts `n` private servers and a `Quorum` of them.
fn quorum_place(n: usize) -> Result<(Place, Deployment), Box<dyn std::error::Error>> {
    let servers = deployments::start_servers(n)?;
    eprintln!(
        "(started {n} private redis-servers on ports {:?} for this run)",
        servers.ports
    );
    let urls: Vec<String> = (0..n).map(|i| servers.url(i)).collect();
    let clients = urls
        .iter()
        .map(|url| redis::Client::open(url.as_str()))
        .collect::<Result<Vec<_>, _>>()?;
    let place = Place::Quorum {
        quorum: Quorum::new(clients)?,
        urls,
    };
    Ok((place, servers))
}

/// Starts a private Redis Cluster (3 primaries, `replicas` replicas each) and a
/// `ClusterClient` seeded with one of its nodes.
#[cfg(feature = "cluster")]
fn cluster_place(replicas: usize) -> Result<(Place, Deployment), Box<dyn std::error::Error>> {
    let cluster = deployments::start_cluster(replicas)?;
    eprintln!(
        "(started a private Redis Cluster on ports {:?} for this run)",
        cluster.ports
    );
    let seed = cluster.url(0);
    let place = Place::Cluster {
        client: Box::new(redis::cluster::ClusterClient::new(vec![seed.as_str()])?),
        seed: redis::Client::open(seed.as_str())?,
    };
    Ok((place, cluster))
}

#[cfg(not(feature = "cluster"))]
fn cluster_place(_replicas: usize) -> Result<(Place, Deployment), Box<dyn std::error::Error>> {
    Err("--cluster needs the cluster feature: rebuild with \
         `cargo run --release --example bench --features cluster -- --cluster`"
        .into())
}

fn run_loop_cells(place: &Place, options: &Options) -> Result<(), Box<dyn std::error::Error>> {
    if !options.json {
        println!(
            "{:<8} {:<15} {:>4} {:>7} {:>8} {:>7} {:>7} {:>8} {:>8} {:>8} {:>6} {:>6} {:>5}",
            "backend",
            "impl",
            "conc",
            "hold_ms",
            "total",
            "min",
            "max",
            "ho_p50",
            "ho_p99",
            "cyc_p50",
            "busy%",
            "rtt",
            "x_rtt"
        );
    }
    for &imp in &options.impls {
        match imp {
            Impl::Python => {
                eprintln!("(python: only the crash and overshoot cells; no loop cells)");
                continue;
            }
            // Its keys are not hash-tagged and its connection is to one node.
            Impl::Polling if place.backend() != "server" => {
                eprintln!("(polling: one server only; no loop cells on --cluster or --quorum)");
                continue;
            }
            Impl::RedlockPolling if place.backend() != "quorum" => {
                eprintln!("(redlock-polling: --quorum only)");
                continue;
            }
            // Like `polling`: its keys and connections are for one server here.
            Impl::Rslock if place.backend() != "server" => {
                eprintln!("(rslock: one server only; no loop cells on --cluster or --quorum)");
                continue;
            }
            Impl::DistributedLock => {
                eprintln!("(distributed-lock: only the semaphore and rwlock cells)");
                continue;
            }
            Impl::OursFair if place.backend() == "quorum" => {
                eprintln!("(ours-fair: a quorum refuses the fair lock)");
                continue;
            }
            _ => {}
        }
        for &concurrency in options.concurrency.as_deref().unwrap_or(&[1, 2, 6]) {
            for &hold_ms in &options.hold_ms {
                let cell = run_cell(place, imp, concurrency, hold_ms, options.seconds)?;
                cell.print(options.json);
            }
        }
    }
    Ok(())
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut options = Options {
        url: None,
        cluster: false,
        cluster_replicas: 1,
        quorum: None,
        seconds: 5.0,
        seconds_given: false,
        concurrency: None,
        hold_ms: vec![0, 10],
        // Set after the loop: the default depends on --quorum.
        impls: Vec::new(),
        json: false,
        cells: vec![CellKind::Loop],
        trials: 20,
        expire_ms: 300,
        timeout_ms: vec![50, 300, 1000],
        tasks: 10_000,
        names: 100,
        permits: 4,
        readers: 6,
        writers: 2,
        holders: vec![0, 100, 1000, 10_000],
        waiters: None,
        cycles: 300,
        acquisitions: 400,
        #[cfg(feature = "tokio")]
        loads: load_cells::Load::ALL.to_vec(),
        #[cfg(feature = "tokio")]
        load_scale: 1.0,
    };
    let mut impls = None;
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--url" => options.url = Some(value()?),
            "--cluster" => options.cluster = true,
            "--quorum" => {
                let n: usize = value()?.parse().map_err(|e| format!("--quorum: {e}"))?;
                if n < 3 {
                    return Err("--quorum needs at least 3 servers".into());
                }
                options.quorum = Some(n);
            }
            "--cluster-replicas" => {
                options.cluster_replicas = value()?
                    .parse()
                    .map_err(|e| format!("--cluster-replicas: {e}"))?;
            }
            "--seconds" => {
                options.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?;
                if !(options.seconds > 0.0 && options.seconds.is_finite()) {
                    return Err("--seconds must be positive".into());
                }
                options.seconds_given = true;
            }
            "--concurrency" => options.concurrency = Some(list(&value()?, "--concurrency")?),
            "--hold-ms" => options.hold_ms = list(&value()?, "--hold-ms")?,
            "--impl" => {
                impls = Some(
                    value()?
                        .split(',')
                        .map(|name| match name {
                            "ours" => Ok(Impl::Ours),
                            "ours-fair" => Ok(Impl::OursFair),
                            "polling" => Ok(Impl::Polling),
                            "python" => Ok(Impl::Python),
                            "redlock-polling" => Ok(Impl::RedlockPolling),
                            "ours-async" if cfg!(feature = "tokio") => Ok(Impl::OursAsync),
                            "ours-async" => Err(rebuild("ours-async", "tokio")),
                            "rslock" if cfg!(feature = "bench-rslock") => Ok(Impl::Rslock),
                            "rslock" => Err(rebuild("rslock", "bench-rslock")),
                            "distributed-lock" if cfg!(feature = "bench-distributed-lock") => {
                                Ok(Impl::DistributedLock)
                            }
                            "distributed-lock" => {
                                Err(rebuild("distributed-lock", "bench-distributed-lock"))
                            }
                            other => Err(format!(
                                "--impl: unknown {other:?} (ours, ours-fair, polling, python, \
                                 redlock-polling, ours-async, rslock, distributed-lock)"
                            )),
                        })
                        .collect::<Result<_, _>>()?,
                )
            }
            "--json" => options.json = true,
            "--cell" => {
                options.cells = value()?
                    .split(',')
                    .map(|name| match name {
                        "loop" => Ok(CellKind::Loop),
                        "crash" => Ok(CellKind::Crash),
                        "overshoot" => Ok(CellKind::Overshoot),
                        "names" => Ok(CellKind::Names),
                        "wait1" => Ok(CellKind::Wait1),
                        "scale" if cfg!(feature = "tokio") => Ok(CellKind::Scale),
                        "scale" => Err(rebuild("the scale cell", "tokio")),
                        "semaphore" => Ok(CellKind::Semaphore),
                        "rwlock" => Ok(CellKind::RwLock),
                        "permit-crash" => Ok(CellKind::PermitCrash),
                        "dead-waiter" => Ok(CellKind::DeadWaiter),
                        "fifo" => Ok(CellKind::Fifo),
                        "engine-cost" => Ok(CellKind::EngineCost),
                        "engine-instructions" => Ok(CellKind::EngineInstructions),
                        "election" => Ok(CellKind::Election),
                        "connections" if cfg!(feature = "tokio") => Ok(CellKind::Connections),
                        "connections" => Err(rebuild("the connections cell", "tokio")),
                        "idle-load" if cfg!(feature = "tokio") => Ok(CellKind::IdleLoad),
                        "idle-load" => Err(rebuild("the idle-load cell", "tokio")),
                        "loss-notice" => Ok(CellKind::LossNotice),
                        "handoff-path" if cfg!(feature = "tracing") => Ok(CellKind::HandoffPath),
                        "handoff-path" => Err(rebuild("the handoff-path cell", "tracing")),
                        other => Err(format!(
                            "--cell: unknown {other:?} (loop, names, wait1, crash, overshoot, \
                             scale, semaphore, rwlock, permit-crash, dead-waiter, fifo, \
                             engine-cost, engine-instructions, connections, idle-load, \
                             election, loss-notice, handoff-path)"
                        )),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--trials" => {
                options.trials = value()?.parse().map_err(|e| format!("--trials: {e}"))?;
                if options.trials == 0 {
                    return Err("--trials must be at least 1".into());
                }
            }
            "--expire-ms" => {
                options.expire_ms = value()?.parse().map_err(|e| format!("--expire-ms: {e}"))?;
                if options.expire_ms == 0 {
                    return Err("--expire-ms must be at least 1".into());
                }
            }
            "--timeout-ms" => options.timeout_ms = list(&value()?, "--timeout-ms")?,
            "--tasks" => options.tasks = value()?.parse().map_err(|e| format!("--tasks: {e}"))?,
            "--names" => options.names = value()?.parse().map_err(|e| format!("--names: {e}"))?,
            "--permits" => {
                options.permits = value()?.parse().map_err(|e| format!("--permits: {e}"))?;
                if options.permits == 0 {
                    return Err("--permits must be at least 1".into());
                }
            }
            "--readers" => {
                options.readers = value()?.parse().map_err(|e| format!("--readers: {e}"))?
            }
            "--writers" => {
                options.writers = value()?.parse().map_err(|e| format!("--writers: {e}"))?
            }
            "--holders" => options.holders = list(&value()?, "--holders")?,
            "--waiters" => options.waiters = Some(list(&value()?, "--waiters")?),
            "--cycles" => {
                options.cycles = value()?.parse().map_err(|e| format!("--cycles: {e}"))?;
                if options.cycles == 0 {
                    return Err("--cycles must be at least 1".into());
                }
            }
            "--acquisitions" => {
                options.acquisitions = value()?
                    .parse()
                    .map_err(|e| format!("--acquisitions: {e}"))?;
                if options.acquisitions == 0 {
                    return Err("--acquisitions must be at least 1".into());
                }
            }
            #[cfg(feature = "tokio")]
            "--load" => {
                options.loads = value()?
                    .split(',')
                    .map(load_cells::Load::parse)
                    .collect::<Result<_, _>>()?
            }
            #[cfg(feature = "tokio")]
            "--load-scale" => {
                options.load_scale = value()?.parse().map_err(|e| format!("--load-scale: {e}"))?;
                if !(options.load_scale > 0.0 && options.load_scale.is_finite()) {
                    return Err("--load-scale must be positive".into());
                }
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if options.concurrency.as_ref().is_some_and(|c| c.contains(&0)) {
        return Err("--concurrency values must be at least 1".into());
    }
    // The impls each place can run: `polling` is for one server, `redlock-polling` for a quorum.
    options.impls = impls.unwrap_or_else(|| {
        if options.quorum.is_some() {
            vec![Impl::Ours, Impl::RedlockPolling]
        } else {
            vec![Impl::Ours, Impl::Polling]
        }
    });
    if options.cluster && options.url.is_some() {
        return Err("--cluster starts a cluster of its own: it takes no --url".into());
    }
    if options.quorum.is_some() && (options.cluster || options.url.is_some()) {
        return Err("--quorum starts servers of its own: it takes no --url or --cluster".into());
    }
    if options.quorum.is_some() && options.cells.iter().any(|&kind| kind != CellKind::Loop) {
        return Err("--quorum runs the loop cells only".into());
    }
    // The cells that kill processes or time a server's expiries: one server only.
    let tail = |kind: &CellKind| {
        use CellKind::*;
        matches!(
            kind,
            Crash
                | Overshoot
                | PermitCrash
                | DeadWaiter
                | Fifo
                | EngineCost
                | EngineInstructions
                | Connections
                | IdleLoad
                | Election
                | LossNotice
                | HandoffPath
        )
    };
    if options.cluster && options.cells.iter().any(tail) {
        return Err(
            "--cluster runs the loop, names, wait1, semaphore and rwlock cells only".into(),
        );
    }
    if options.cluster && options.cluster_replicas == 0 && options.cells.contains(&CellKind::Wait1)
    {
        return Err("the wait1 cell needs a replica: --cluster-replicas 1".into());
    }
    if options.cluster && options.cells.contains(&CellKind::Scale) {
        return Err("the scale cell counts one server's clients: it takes no --cluster".into());
    }
    if options.names == 0 || options.tasks < options.names {
        return Err("--names must be at least 1, and --tasks at least --names".into());
    }
    Ok(options)
}

/// What a build without `feature` says when asked for `what`.
fn rebuild(what: &str, feature: &str) -> String {
    format!(
        "{what} needs the {feature} feature: rebuild with \
         `cargo run --release --example bench --features {feature} -- ..`"
    )
}

fn list<T: std::str::FromStr>(text: &str, flag: &str) -> Result<Vec<T>, String> {
    text.split(',')
        .map(|n| {
            n.trim()
                .parse()
                .map_err(|_| format!("{flag}: bad number {n:?}"))
        })
        .collect()
}

fn run_cell(
    place: &Place,
    imp: Impl,
    concurrency: usize,
    hold_ms: u64,
    seconds: f64,
) -> Result<Cell, Box<dyn std::error::Error>> {
    let name = format!("bench:{}:{concurrency}:{hold_ms}", imp.name());
    let start = Instant::now();
    let turns = Turns {
        start,
        end: start + Duration::from_secs_f64(seconds),
        hold: Duration::from_millis(hold_ms),
        at_least_once: false,
        last_release: Arc::default(),
    };
    let per_thread: Vec<ThreadStats> = match imp {
        #[cfg(feature = "tokio")]
        Impl::OursAsync | Impl::Rslock => {
            async_cells::run_tasks(place, imp, &name, concurrency, &turns)?
        }
        _ => thread::scope(|s| {
            let workers: Vec<_> = (0..concurrency)
                .map(|_| {
                    s.spawn(|| match imp {
                        Impl::Ours => run_ours(place, &name, false, turns.clone()),
                        Impl::OursFair => run_ours(place, &name, true, turns.clone()),
                        Impl::Polling => {
                            // Only on one server (run_loop_cells), which holds every key.
                            let client = place.node_client(&name)?;
                            run_polling(&client, &name, turns.clone())
                        }
                        Impl::RedlockPolling => match place {
                            Place::Quorum { urls, .. } => {
                                run_redlock_polling(urls, &name, turns.clone())
                            }
                            _ => Err("redlock-polling runs on --quorum only".to_string()),
                        },
                        _ => Err(format!("{} has no threads' loop cells", imp.name())),
                    })
                })
                .collect();
            join_all(workers.into_iter().map(|w| w.join()))
        })?,
    };
    let wall = start.elapsed();
    let total = per_thread.iter().map(|t| t.acquisitions).sum();
    let mut handoffs: Vec<u64> = per_thread.iter().flat_map(|t| t.handoffs.clone()).collect();
    let mut cycles: Vec<u64> = per_thread.iter().flat_map(|t| t.cycles.clone()).collect();
    let held: Duration = per_thread.iter().map(|t| t.held).sum();
    let mut pings: Vec<u64> = per_thread.iter().flat_map(|t| t.pings.clone()).collect();
    Ok(Cell {
        backend: place.backend(),
        servers: place.servers(),
        imp,
        concurrency,
        hold_ms,
        seconds,
        total,
        min: per_thread.iter().map(|t| t.acquisitions).min().unwrap_or(0),
        max: per_thread.iter().map(|t| t.acquisitions).max().unwrap_or(0),
        handoff_p50_us: (concurrency > 1)
            .then(|| percentile(&mut handoffs, 50.0))
            .flatten(),
        handoff_p99_us: (concurrency > 1)
            .then(|| percentile(&mut handoffs, 99.0))
            .flatten(),
        cycle_p50_us: (concurrency == 1)
            .then(|| percentile(&mut cycles, 50.0))
            .flatten(),
        busy_pct: 100.0 * held.as_secs_f64() / wall.as_secs_f64(),
        rtt_p50_us: percentile(&mut pings, 50.0).unwrap_or(0),
        gave_up: (imp == Impl::RedlockPolling).then(|| per_thread.iter().map(|t| t.gave_up).sum()),
    })
}

/// How a contender takes its turns, and the clock it shares with the other contenders for
/// the same name.
#[derive(Clone)]
struct Turns {
    start: Instant,
    end: Instant,
    hold: Duration,
    /// Go on past `end` until this contender has had the lock once (the `scale` cell).
    at_least_once: bool,
    /// Nanoseconds since `start` at which the name's last holder called release.
    last_release: Arc<AtomicU64>,
}

/// The loop every impl shares: take the lock, hold it, let go, and time it all; on the first
/// turn and every [`PING_EVERY`]th after it, one `PING` on `pinger` if there is one. Async, so that the async
/// impls run it as tokio tasks; the threads run it with [`run_blocking`], their steps blocking
/// until done and returning a ready future. The steps are plain closures, not `async` ones:
/// a task must be `Send`, and the futures of an `async` closure, which borrow the closure, are
/// not taken to be.
async fn measure<G, A, R>(
    turns: Turns,
    mut pinger: Option<Pinger>,
    mut acquire: impl FnMut() -> A,
    mut release: impl FnMut(G) -> R,
) -> Result<ThreadStats, String>
where
    A: Future<Output = Result<G, String>>,
    R: Future<Output = Result<(), String>>,
{
    let mut stats = ThreadStats::default();
    let since_start = |t: Instant| t.duration_since(turns.start).as_nanos() as u64;
    let on_runtime = tokio::runtime::Handle::try_current().is_ok();
    while Instant::now() < turns.end || (turns.at_least_once && stats.acquisitions == 0) {
        let before = Instant::now();
        let guard = acquire().await?;
        let acquired = Instant::now();
        stats.waits.push((acquired - before).as_micros() as u64);
        let released_at = turns.last_release.load(Ordering::SeqCst);
        if released_at > 0 {
            stats
                .handoffs
                .push((since_start(acquired).saturating_sub(released_at)) / 1000);
        }
        stats.acquisitions += 1;
        if !turns.hold.is_zero() {
            // A task must not block its worker; a thread has no runtime to sleep on.
            if on_runtime {
                tokio::time::sleep(turns.hold).await;
            } else {
                thread::sleep(turns.hold);
            }
        }
        let releasing = Instant::now();
        stats.held += releasing - acquired;
        turns
            .last_release
            .store(since_start(releasing), Ordering::SeqCst);
        release(guard).await?;
        stats
            .cycles
            .push((Instant::now() - before).as_micros() as u64);
        if let Some(pinger) = pinger
            .as_mut()
            // From the first turn: a short cell on a loaded machine may make fewer than
            // PING_EVERY, and would then have no round trip to compare with.
            .filter(|_| stats.acquisitions % PING_EVERY == 1)
        {
            stats
                .pings
                .push(pinger.ping().await.map_err(|e| e.to_string())?);
        }
    }
    Ok(stats)
}

/// Runs a thread's [`measure`]: each of its steps blocks the thread until it is done, so the
/// future is ready at its first poll and needs no runtime.
fn run_blocking<T>(future: impl Future<Output = T>) -> T {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("a blocking contender never waits for a wake-up"),
    }
}

/// An `ours` contender; `fair`: an `ours-fair` one.
fn run_ours(place: &Place, name: &str, fair: bool, turns: Turns) -> Result<ThreadStats, String> {
    let lock = place
        .lock(name)
        .fair(fair)
        .expire(LOCK_EXPIRE)
        .build()
        .map_err(|e| e.to_string())?;
    run_blocking(measure(
        turns,
        Some(place.pinger(name)?),
        || ready(lock.acquire().map_err(|e| e.to_string())),
        |()| ready(lock.release().map_err(|e| e.to_string())),
    ))
}

fn run_polling(client: &redis::Client, name: &str, turns: Turns) -> Result<ThreadStats, String> {
    let key = format!("lock:{name}");
    let id = format!("{:?}-{}", thread::current().id(), std::process::id());
    let release_script = redis::Script::new(POLLING_RELEASE);
    let conn = std::cell::RefCell::new(client.get_connection().map_err(|e| e.to_string())?);
    let pinger = Pinger::Blocking(client.get_connection().map_err(|e| e.to_string())?);
    let take = || loop {
        let taken: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(&id)
            .arg("NX")
            .arg("PX")
            .arg(LOCK_EXPIRE.as_millis() as u64)
            .query(&mut *conn.borrow_mut())
            .map_err(|e| e.to_string())?;
        if taken.is_some() {
            return Ok(());
        }
        thread::sleep(POLL_INTERVAL);
    };
    let give_back = || {
        let _: i64 = release_script
            .key(&key)
            .arg(&id)
            .invoke(&mut *conn.borrow_mut())
            .map_err(|e| e.to_string())?;
        Ok(())
    };
    run_blocking(measure(
        turns,
        Some(pinger),
        || ready(take()),
        |()| ready(give_back()),
    ))
}

/// `redlock-polling` on the quorum's servers: each thread a [`Redlock`] of its own.
fn run_redlock_polling(urls: &[String], name: &str, turns: Turns) -> Result<ThreadStats, String> {
    let redlock = std::cell::RefCell::new(Redlock::new(urls, name)?);
    let gave_up = std::cell::Cell::new(0);
    let pinged = redis::Client::open(urls[0].as_str()).map_err(|e| e.to_string())?;
    // A redsync caller gets ErrFailed after its tries; one that needs the lock calls Lock()
    // again, as this loop does, and the cell counts how often.
    let take = || loop {
        if redlock.borrow_mut().lock()? {
            return Ok(());
        }
        gave_up.set(gave_up.get() + 1);
    };
    let mut stats = run_blocking(measure(
        turns,
        Some(Pinger::Blocking(
            pinged.get_connection().map_err(|e| e.to_string())?,
        )),
        || ready(take()),
        |()| {
            redlock.borrow_mut().unlock();
            ready(Ok(()))
        },
    ))?;
    stats.gave_up = gave_up.get();
    Ok(stats)
}

/// A polling Redlock with redsync's (Go) defaults, the baseline for `Quorum`: a try sends
/// `SET key id NX PX expire` to every server at once and reads the replies, each by
/// [`REDLOCK_SERVER_TIMEOUT`] from the send; it holds the lock if a majority said OK and
/// validity = expire − elapsed − (1 % of expire + 2 ms) is above zero, else it releases on
/// every server. [`lock`](Redlock::lock) makes up to 32 tries, with a random pause of
/// 50–250 ms before each retry.
struct Redlock {
    clients: Vec<redis::Client>,
    /// One connection per server; `None` after an error or a timeout, until the next request
    /// reconnects: a reply that came too late would be read as the next request's.
    conns: Vec<Option<redis::Connection>>,
    key: String,
    id: String,
    /// The owner-checked `DEL`, loaded on every connection and sent as `EVALSHA`.
    release: redis::Script,
}

impl Redlock {
    fn new(urls: &[String], name: &str) -> Result<Redlock, String> {
        let clients = urls
            .iter()
            .map(|url| redis::Client::open(url.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let random = || getrandom::u64().map_err(|e| e.to_string());
        Ok(Redlock {
            conns: clients.iter().map(|_| None).collect(),
            clients,
            key: format!("lock:{name}"),
            // redsync's value is 16 random bytes.
            id: format!("{:016x}{:016x}", random()?, random()?),
            release: redis::Script::new(POLLING_RELEASE),
        })
    }

    /// Up to [`REDLOCK_TRIES`] tries; false when none won.
    fn lock(&mut self) -> Result<bool, String> {
        for attempt in 0..REDLOCK_TRIES {
            if attempt > 0 {
                let spread = REDLOCK_RETRY_MAX_MS - REDLOCK_RETRY_MIN_MS;
                let pause =
                    REDLOCK_RETRY_MIN_MS + getrandom::u64().map_err(|e| e.to_string())? % spread;
                thread::sleep(Duration::from_millis(pause));
            }
            if self.try_once() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn try_once(&mut self) -> bool {
        let started = Instant::now();
        let mut set = redis::cmd("SET");
        set.arg(&self.key)
            .arg(&self.id)
            .arg("NX")
            .arg("PX")
            .arg(LOCK_EXPIRE.as_millis() as u64);
        let said_ok = self
            .on_all(&set)
            .iter()
            .filter(|reply| matches!(reply, Some(redis::Value::Okay)))
            .count();
        let drift = LOCK_EXPIRE / 100 + Duration::from_millis(2);
        if said_ok > self.clients.len() / 2 && started.elapsed() + drift < LOCK_EXPIRE {
            return true;
        }
        // Also where the reply was lost: the SET may have been applied there.
        self.unlock();
        false
    }

    /// The owner-checked `DEL` on every server.
    fn unlock(&mut self) {
        let mut release = redis::cmd("EVALSHA");
        release
            .arg(self.release.get_hash())
            .arg(1)
            .arg(&self.key)
            .arg(&self.id);
        self.on_all(&release);
    }

    /// Sends `cmd` to every server, then reads each reply by [`REDLOCK_SERVER_TIMEOUT`] from
    /// the send; `None` for a server that did not answer in time, or with an error.
    fn on_all(&mut self, cmd: &redis::Cmd) -> Vec<Option<redis::Value>> {
        let packed = cmd.get_packed_command();
        let deadline = Instant::now() + REDLOCK_SERVER_TIMEOUT;
        let sent: Vec<bool> = (0..self.clients.len())
            .map(|i| {
                let ok = self
                    .connection(i)
                    .is_some_and(|conn| conn.send_packed_command(&packed).is_ok());
                if !ok {
                    self.conns[i] = None;
                }
                ok
            })
            .collect();
        (self.conns.iter_mut().zip(sent))
            .map(|(slot, sent)| {
                let conn = slot.as_mut().filter(|_| sent)?;
                let left = deadline.saturating_duration_since(Instant::now());
                let reply = (!left.is_zero())
                    .then(|| {
                        conn.set_read_timeout(Some(left))
                            .and_then(|()| conn.recv_response())
                    })
                    .and_then(Result::ok);
                if reply.is_none() {
                    *slot = None;
                }
                reply
            })
            .collect()
    }

    /// Server `i`'s connection, connecting (and loading the release script) if it has none.
    fn connection(&mut self, i: usize) -> Option<&mut redis::Connection> {
        if self.conns[i].is_none() {
            let mut conn = self.clients[i]
                .get_connection_with_timeout(REDLOCK_SERVER_TIMEOUT)
                .ok()?;
            self.release.load(&mut conn).ok()?;
            self.conns[i] = Some(conn);
        }
        self.conns[i].as_mut()
    }
}

/// The `names` cells: one per concurrency (default 6).
fn run_names(place: &Place, options: &Options) -> Result<(), Box<dyn std::error::Error>> {
    if !options.json {
        println!(
            "{:<9} {:<8} {:>4} {:>8} {:>9} {:>8} {:>8} {:>6} {:>7} {:>7} {:>5}",
            "cell",
            "backend",
            "conc",
            "total",
            "acq/s",
            "cyc_p50",
            "cyc_p99",
            "rtt",
            "p50xrtt",
            "p99xrtt",
            "nodes"
        );
    }
    for &concurrency in options.concurrency.as_deref().unwrap_or(&[6]) {
        let cell = run_names_cell(place, concurrency, options.seconds)?;
        cell.print(options.json);
    }
    Ok(())
}

/// `concurrency` threads, each looping acquire → release on a name of its own.
fn run_names_cell(
    place: &Place,
    concurrency: usize,
    seconds: f64,
) -> Result<NamesCell, Box<dyn std::error::Error>> {
    let names: Vec<String> = (0..concurrency)
        .map(|i| format!("bench:names:{concurrency}:{i}"))
        .collect();
    let mut nodes = names
        .iter()
        .map(|name| place.node_for(name))
        .collect::<Result<Vec<_>, _>>()?;
    nodes.sort();
    nodes.dedup();
    let start = Instant::now();
    // No other thread takes a name, so there are no handoffs to time: each thread's own
    // releases are all `measure` sees.
    let turns = Turns {
        start,
        end: start + Duration::from_secs_f64(seconds),
        hold: Duration::ZERO,
        at_least_once: false,
        last_release: Arc::default(),
    };
    let per_thread: Vec<ThreadStats> = thread::scope(|s| {
        let workers: Vec<_> = names
            .iter()
            .map(|name| {
                let turns = Turns {
                    last_release: Arc::default(),
                    ..turns.clone()
                };
                s.spawn(move || run_ours(place, name, false, turns))
            })
            .collect();
        join_all(workers.into_iter().map(|w| w.join()))
    })?;
    let wall = start.elapsed();
    let total: u64 = per_thread.iter().map(|t| t.acquisitions).sum();
    let mut cycles: Vec<u64> = per_thread.iter().flat_map(|t| t.cycles.clone()).collect();
    let mut pings: Vec<u64> = per_thread.iter().flat_map(|t| t.pings.clone()).collect();
    Ok(NamesCell {
        backend: place.backend(),
        concurrency,
        seconds,
        total,
        per_second: total as f64 / wall.as_secs_f64(),
        cycle_p50_us: percentile(&mut cycles, 50.0),
        cycle_p99_us: percentile(&mut cycles, 99.0),
        rtt_p50_us: percentile(&mut pings, 50.0),
        nodes: nodes.len(),
    })
}

/// A `names` cell's figures.
struct NamesCell {
    backend: &'static str,
    concurrency: usize,
    seconds: f64,
    total: u64,
    per_second: f64,
    cycle_p50_us: Option<u64>,
    cycle_p99_us: Option<u64>,
    /// Each thread pings the server that holds its own name's key.
    rtt_p50_us: Option<u64>,
    /// How many servers the names' keys are on.
    nodes: usize,
}

impl Line for NamesCell {
    fn json(&self) -> String {
        format!(
            concat!(
                r#"{{"cell":"names","backend":"{}","concurrency":{},"seconds":{},"total":{},"#,
                r#""acquisitions_per_s":{:.1},"cycle_p50_us":{},"cycle_p99_us":{},"#,
                r#""rtt_p50_us":{},"cycle_p50_rtt":{},"cycle_p99_rtt":{},"nodes":{}}}"#
            ),
            self.backend,
            self.concurrency,
            self.seconds,
            self.total,
            self.per_second,
            opt(self.cycle_p50_us),
            opt(self.cycle_p99_us),
            opt(self.rtt_p50_us),
            opt_f(rtt_multiple(self.cycle_p50_us, self.rtt_p50_us)),
            opt_f(rtt_multiple(self.cycle_p99_us, self.rtt_p50_us)),
            self.nodes,
        )
    }

    fn row(&self) -> String {
        let dash = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        format!(
            "{:<9} {:<8} {:>4} {:>8} {:>9.0} {:>8} {:>8} {:>6} {:>7} {:>7} {:>5}",
            "names",
            self.backend,
            self.concurrency,
            self.total,
            self.per_second,
            dash(self.cycle_p50_us),
            dash(self.cycle_p99_us),
            dash(self.rtt_p50_us),
            opt_f(rtt_multiple(self.cycle_p50_us, self.rtt_p50_us)),
            opt_f(rtt_multiple(self.cycle_p99_us, self.rtt_p50_us)),
            self.nodes,
        )
    }
}

/// The `wait1` cell. `WAIT 1` needs a replica: every primary of the bench's cluster has one,
/// but one server may have none, so there the cell starts a primary + replica pair of its own.
fn run_wait1(place: &Place, options: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let pair: Deployment;
    let pair_place: Place;
    let place = match place {
        Place::Server { .. } => {
            pair = deployments::start_pair()?;
            eprintln!(
                "(wait1: started a private primary + replica on ports {:?} for this cell)",
                pair.ports
            );
            pair_place = Place::server(pair.url(0))?;
            warm_up(&pair_place)?;
            &pair_place
        }
        Place::Quorum { .. } => unreachable!("parse_args refuses this cell with --quorum"),
        #[cfg(feature = "cluster")]
        cluster @ Place::Cluster { .. } => cluster,
    };
    let name = "bench:wait1";
    let plain = place.lock(name).expire(LOCK_EXPIRE).build()?;
    let waiting = place
        .lock(name)
        .expire(LOCK_EXPIRE)
        .replicas(1, WAIT_TIMEOUT)
        .build()?;
    let mut pinger = place.node_client(name)?.get_connection()?;
    let (mut without, mut with, mut pings) = (Vec::new(), Vec::new(), Vec::new());
    let end = Instant::now() + Duration::from_secs_f64(options.seconds);
    while Instant::now() < end {
        // Turn about, so that the machine's drifting latency weighs on both alike.
        for (lock, cycles) in [(&plain, &mut without), (&waiting, &mut with)] {
            let before = Instant::now();
            lock.acquire()?;
            lock.release()?;
            cycles.push(before.elapsed().as_micros() as u64);
        }
        if (without.len() as u64).is_multiple_of(PING_EVERY) {
            pings.push(ping(&mut pinger)?);
        }
    }
    let cycles = without.len();
    let cycle_p50_us = percentile(&mut without, 50.0);
    let wait_cycle_p50_us = percentile(&mut with, 50.0);
    let rtt_p50_us = percentile(&mut pings, 50.0);
    let extra_us = cycle_p50_us
        .zip(wait_cycle_p50_us)
        .map(|(without, with)| with as i64 - without as i64);
    let extra_rtt = extra_us
        .zip(rtt_p50_us)
        .filter(|&(_, rtt)| rtt > 0)
        .map(|(extra, rtt)| extra as f64 / rtt as f64);
    if options.json {
        println!(
            concat!(
                r#"{{"cell":"wait1","backend":"{}","replicas":1,"wait_timeout_ms":{},"#,
                r#""seconds":{},"cycles":{},"cycle_p50_us":{},"wait_cycle_p50_us":{},"#,
                r#""extra_us":{},"extra_rtt":{},"rtt_p50_us":{}}}"#
            ),
            place.backend(),
            WAIT_TIMEOUT.as_millis(),
            options.seconds,
            cycles,
            opt(cycle_p50_us),
            opt(wait_cycle_p50_us),
            extra_us.map_or("null".to_string(), |v| v.to_string()),
            opt_f(extra_rtt),
            opt(rtt_p50_us),
        );
    } else {
        let dash = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        println!(
            "{:<9} {:<8} {:>8} {:>8} {:>9} {:>8} {:>6} {:>9}",
            "cell", "backend", "cycles", "cyc_p50", "wait_p50", "extra", "rtt", "extraxrtt"
        );
        println!(
            "{:<9} {:<8} {:>8} {:>8} {:>9} {:>8} {:>6} {:>9}",
            "wait1",
            place.backend(),
            cycles,
            dash(cycle_p50_us),
            dash(wait_cycle_p50_us),
            extra_us.map_or("-".to_string(), |v| v.to_string()),
            dash(rtt_p50_us),
            opt_f(extra_rtt),
        );
    }
    Ok(())
}

/// A cell's figures, as a table row or (`--json`) as one JSON object.
trait Line {
    fn json(&self) -> String;
    fn row(&self) -> String;

    fn print(&self, json: bool) {
        println!("{}", if json { self.json() } else { self.row() });
    }
}

/// `figure` as a multiple of `rtt`, when both are known.
fn rtt_multiple(figure: Option<u64>, rtt: Option<u64>) -> Option<f64> {
    let (figure, rtt) = figure.zip(rtt.filter(|&rtt| rtt > 0))?;
    Some(figure as f64 / rtt as f64)
}

/// A second of untimed lock traffic first, so the first cell does not pay for cold caches,
/// connection set-up and the CPU clocking up.
fn warm_up(place: &Place) -> Result<(), Box<dyn std::error::Error>> {
    let name = "bench:warm-up";
    // With an expiry, as the cells' locks have (a quorum lock needs one).
    let lock = place.lock(name).expire(LOCK_EXPIRE).build()?;
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        lock.acquire()?;
        lock.release()?;
    }
    let mut conn = place.node_client(name)?.get_connection()?;
    for _ in 0..WARM_UP_PINGS {
        ping(&mut conn)?;
    }
    Ok(())
}

/// One `PING` round trip, in microseconds.
fn ping(conn: &mut redis::Connection) -> redis::RedisResult<u64> {
    let sent = Instant::now();
    let _: String = redis::cmd("PING").query(conn)?;
    Ok(sent.elapsed().as_micros() as u64)
}

/// Each worker's result, or the first error (a panicked worker is one), from what joining
/// each worker (a thread or a task) returned.
fn join_all<T, P>(
    joined: impl IntoIterator<Item = Result<Result<T, String>, P>>,
) -> Result<Vec<T>, String> {
    joined
        .into_iter()
        .map(|w| w.map_err(|_| "a bench worker panicked".to_string())?)
        .collect()
}

fn percentile<T: Ord + Copy>(samples: &mut [T], pct: f64) -> Option<T> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let rank = ((pct / 100.0) * (samples.len() - 1) as f64).round() as usize;
    Some(samples[rank.min(samples.len() - 1)])
}

fn opt(value: Option<u64>) -> String {
    value.map_or("null".to_string(), |v| v.to_string())
}

/// A ratio with two decimals, or `null`.
fn opt_f(value: Option<f64>) -> String {
    value.map_or("null".to_string(), |v| format!("{v:.2}"))
}

impl Line for Cell {
    fn json(&self) -> String {
        // Only where they mean something: `servers` on a quorum, `gave_up` for redlock-polling.
        let servers = self
            .servers
            .map_or(String::new(), |n| format!(r#""servers":{n},"#));
        let gave_up = self
            .gave_up
            .map_or(String::new(), |n| format!(r#","gave_up":{n}"#));
        format!(
            concat!(
                r#"{{"backend":"{}",{}"impl":"{}","concurrency":{},"hold_ms":{},"seconds":{},"#,
                r#""total":{},"#,
                r#""min":{},"max":{},"handoff_p50_us":{},"handoff_p99_us":{},"#,
                r#""cycle_p50_us":{},"busy_pct":{:.2},"rtt_p50_us":{}{}}}"#
            ),
            self.backend,
            servers,
            self.imp.name(),
            self.concurrency,
            self.hold_ms,
            self.seconds,
            self.total,
            self.min,
            self.max,
            opt(self.handoff_p50_us),
            opt(self.handoff_p99_us),
            opt(self.cycle_p50_us),
            self.busy_pct,
            self.rtt_p50_us,
            gave_up,
        )
    }

    fn row(&self) -> String {
        let dash = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        // The cell's figure as a multiple of the RTT: the cycle alone, else the handoff p50.
        let x_rtt = rtt_multiple(
            self.cycle_p50_us.or(self.handoff_p50_us),
            Some(self.rtt_p50_us),
        );
        let mut row = format!(
            "{:<8} {:<15} {:>4} {:>7} {:>8} {:>7} {:>7} {:>8} {:>8} {:>8} {:>6.1} {:>6} {:>5}",
            self.backend,
            self.imp.name(),
            self.concurrency,
            self.hold_ms,
            self.total,
            self.min,
            self.max,
            dash(self.handoff_p50_us),
            dash(self.handoff_p99_us),
            dash(self.cycle_p50_us),
            self.busy_pct,
            self.rtt_p50_us,
            opt_f(x_rtt),
        );
        if let Some(n) = self.gave_up.filter(|&n| n > 0) {
            row.push_str(&format!("   (all 32 tries failed {n} times)"));
        }
        row
    }
}

/// A `crash` or `overshoot` figure: signed microseconds over `trials` trials.
struct TailCell {
    kind: CellKind,
    imp: Impl,
    /// `expire_ms` for `crash`, `timeout_ms` for `overshoot`.
    param_ms: u64,
    trials: usize,
    p50_us: Option<i64>,
    p99_us: Option<i64>,
    max_us: Option<i64>,
    /// `crash` only: the longest `PTTL` round trip, the most the lateness may be overstated.
    pttl_rtt_max_us: Option<u64>,
    rtt_p50_us: Option<u64>,
    server_hz: Option<u64>,
    note: Option<String>,
}

impl TailCell {
    #[allow(clippy::too_many_arguments)]
    fn new(
        kind: CellKind,
        imp: Impl,
        param_ms: u64,
        mut samples: Vec<i64>,
        pttl_rtts: &[u64],
        mut rtts: Vec<u64>,
        server_hz: Option<u64>,
        note: Option<String>,
    ) -> TailCell {
        TailCell {
            kind,
            imp,
            param_ms,
            trials: samples.len(),
            p50_us: percentile(&mut samples, 50.0),
            p99_us: percentile(&mut samples, 99.0),
            max_us: samples.iter().copied().max(),
            pttl_rtt_max_us: pttl_rtts.iter().copied().max(),
            rtt_p50_us: percentile(&mut rtts, 50.0),
            server_hz,
            note,
        }
    }

    fn names(&self) -> (&'static str, &'static str, &'static str) {
        match self.kind {
            CellKind::Crash => ("crash", "expire_ms", "lateness"),
            CellKind::PermitCrash => ("permit-crash", "expire_ms", "lateness"),
            _ => ("overshoot", "timeout_ms", "overshoot"),
        }
    }

    fn meets_target(&self) -> Option<bool> {
        self.p99_us.map(|p99| p99 <= TARGET_P99_US)
    }
}

impl Line for TailCell {
    fn json(&self) -> String {
        let (cell, param, figure) = self.names();
        let opt_i = |v: Option<i64>| v.map_or("null".to_string(), |v| v.to_string());
        let pttl = if self.kind != CellKind::Overshoot {
            format!(r#""pttl_rtt_max_us":{},"#, opt(self.pttl_rtt_max_us))
        } else {
            String::new()
        };
        format!(
            concat!(
                r#"{{"cell":"{}","impl":"{}","{}":{},"trials":{},"{}_p50_us":{},"#,
                r#""{}_p99_us":{},"{}_max_us":{},"target_p99_us":{},"meets_target":{},"#,
                r#"{}"rtt_p50_us":{},"server_hz":{},"note":{}}}"#
            ),
            cell,
            self.imp.name(),
            param,
            self.param_ms,
            self.trials,
            figure,
            opt_i(self.p50_us),
            figure,
            opt_i(self.p99_us),
            figure,
            opt_i(self.max_us),
            TARGET_P99_US,
            self.meets_target()
                .map_or("null".to_string(), |m| m.to_string()),
            pttl,
            opt(self.rtt_p50_us),
            opt(self.server_hz),
            self.note
                .as_ref()
                .map_or("null".to_string(), |n| format!("{n:?}")),
        )
    }

    fn row(&self) -> String {
        let (cell, param, figure) = self.names();
        let ms = |v: Option<i64>| v.map_or("-".to_string(), |v| format!("{:.1}", v as f64 / 1e3));
        let dash = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        let verdict = match self.meets_target() {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "-",
        };
        let mut row = format!(
            "{:<9} {:<8} {:>16} {:>6} {:>9} {:>9} {:>9} {:>7} {:>6} {:>3}",
            cell,
            self.imp.name(),
            format!("{param}={}", self.param_ms),
            self.trials,
            ms(self.p50_us),
            ms(self.p99_us),
            ms(self.max_us),
            verdict,
            dash(self.rtt_p50_us),
            dash(self.server_hz),
        );
        row.push_str(&format!("   ({figure})"));
        if let Some(rtt) = self.pttl_rtt_max_us {
            row.push_str(&format!(" expiry known to within {rtt} us"));
        }
        if let Some(note) = &self.note {
            row.push_str(&format!("; {note}"));
        }
        row
    }
}

/// The `crash` or `overshoot` cells for every impl asked for.
fn run_tail_cells(
    client: &redis::Client,
    url: &str,
    kind: CellKind,
    options: &Options,
) -> Result<(), Box<dyn std::error::Error>> {
    let server_hz = server_hz(client);
    if !options.json {
        println!(
            "{:<9} {:<8} {:>16} {:>6} {:>9} {:>9} {:>9} {:>7} {:>6} {:>3}",
            "cell", "impl", "param", "trials", "p50_ms", "p99_ms", "max_ms", "p99<=10", "rtt", "hz"
        );
    }
    for &imp in &options.impls {
        let cells = match (kind, imp) {
            (_, Impl::RedlockPolling) => {
                eprintln!("(redlock-polling: --quorum loop cells only)");
                continue;
            }
            (_, Impl::OursAsync | Impl::Rslock | Impl::OursFair) => {
                eprintln!("({}: loop cells only)", imp.name());
                continue;
            }
            (_, Impl::DistributedLock) => {
                eprintln!("(distributed-lock: only the semaphore and rwlock cells)");
                continue;
            }
            (_, Impl::Python) => run_python(url, kind, options, server_hz)?,
            (CellKind::Crash, _) => vec![run_crash(client, url, imp, options, server_hz)?],
            _ => run_overshoot(client, imp, options, server_hz)?,
        };
        for cell in cells {
            cell.print(options.json);
        }
    }
    Ok(())
}

/// A fault cell of the queue primitives (ours only: `--impl` does not apply).
fn run_queue_faults(
    client: &redis::Client,
    url: &str,
    kind: CellKind,
    options: &Options,
) -> Result<(), Box<dyn std::error::Error>> {
    match kind {
        CellKind::PermitCrash => {
            let server_hz = server_hz(client);
            queue_faults::run_permit_crash(client, url, options, server_hz)?.print(options.json)
        }
        CellKind::DeadWaiter => {
            queue_faults::run_dead_waiter(client, url, options)?.print(options.json)
        }
        _ => queue_faults::run_fifo(client, url, options)?.print(options.json),
    }
    Ok(())
}

/// The server's `hz`, or `None` when `CONFIG` is not allowed.
fn server_hz(client: &redis::Client) -> Option<u64> {
    let mut conn = client.get_connection().ok()?;
    let reply: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("hz")
        .query(&mut conn)
        .ok()?;
    reply.get(1)?.parse().ok()
}

/// A pause before `crash` or `overshoot` trial i that spreads its start over one server tick
/// (1/hz): Redis fires `BLPOP` timeouts on its ticks, and back-to-back trials would otherwise
/// lock onto them (a timeout that is a multiple of the tick would always end just after one and
/// look prompt; a crashed holder's expiry would always fall just after one and look late).
fn tick_phase(i: usize, server_hz: Option<u64>) -> Duration {
    let tick = Duration::from_secs(1) / server_hz.filter(|&hz| hz > 0).unwrap_or(10) as u32;
    tick.mul_f64((i as f64 * GOLDEN).fract())
}

/// `a − b` in microseconds, negative when `a` is earlier.
fn signed_us(a: Instant, b: Instant) -> i64 {
    if a >= b {
        (a - b).as_micros() as i64
    } else {
        -((b - a).as_micros() as i64)
    }
}

/// One lock handle of a native impl, for the `crash` and `overshoot` cells.
enum Handle {
    Ours(Lock),
    Polling {
        conn: redis::Connection,
        key: String,
        id: String,
        expire: Option<Duration>,
    },
}

impl Handle {
    fn new(
        client: &redis::Client,
        imp: Impl,
        name: &str,
        expire: Option<Duration>,
    ) -> Result<Handle, Box<dyn std::error::Error>> {
        Ok(match imp {
            Impl::Ours => {
                let mut builder = Lock::builder(client, name);
                if let Some(expire) = expire {
                    builder = builder.expire(expire);
                }
                Handle::Ours(builder.build()?)
            }
            Impl::Polling => Handle::Polling {
                conn: client.get_connection()?,
                key: format!("lock:{name}"),
                id: format!("polling-{}-{:?}", std::process::id(), Instant::now()),
                expire,
            },
            Impl::Python => return Err("python runs in its own process".into()),
            Impl::RedlockPolling => return Err("redlock-polling runs on --quorum only".into()),
            Impl::OursAsync | Impl::Rslock | Impl::DistributedLock | Impl::OursFair => {
                return Err(format!("{} has no crash or overshoot cells", imp.name()).into())
            }
        })
    }

    /// Waits up to `timeout` for the lock (the polling recipe: try, sleep 100 ms, retry).
    fn acquire_timeout(&mut self, timeout: Duration) -> Result<bool, Box<dyn std::error::Error>> {
        match self {
            Handle::Ours(lock) => Ok(lock.acquire_timeout(timeout)?),
            Handle::Polling {
                conn,
                key,
                id,
                expire,
            } => {
                let deadline = Instant::now() + timeout;
                loop {
                    let mut set = redis::cmd("SET");
                    set.arg(&*key).arg(&*id).arg("NX");
                    if let Some(expire) = expire {
                        set.arg("PX").arg(expire.as_millis() as u64);
                    }
                    let taken: Option<String> = set.query(conn)?;
                    if taken.is_some() {
                        return Ok(true);
                    }
                    let now = Instant::now();
                    if now >= deadline {
                        return Ok(false);
                    }
                    thread::sleep(POLL_INTERVAL.min(deadline - now));
                }
            }
        }
    }

    fn release(&mut self) -> Result<(), Box<dyn std::error::Error>> {
        match self {
            Handle::Ours(lock) => Ok(lock.release()?),
            Handle::Polling { conn, key, id, .. } => {
                let _: i64 = redis::Script::new(POLLING_RELEASE)
                    .key(&*key)
                    .arg(&*id)
                    .invoke(conn)?;
                Ok(())
            }
        }
    }
}

/// The hidden role of a `crash` cell's child: take the lock with the expiry, say `held`, and
/// wait to be killed. Arguments: URL, lock name, expiry in milliseconds.
fn crash_holder(
    role: &str,
    mut args: impl Iterator<Item = String>,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut arg = || args.next().ok_or("the holder needs URL NAME EXPIRE_MS");
    let url = arg()?;
    let name = arg()?;
    let expire = Duration::from_millis(arg()?.parse()?);
    let imp = match role {
        "ours" => Impl::Ours,
        "polling" => Impl::Polling,
        other => return Err(format!("unknown holder role {other:?}").into()),
    };
    let client = redis::Client::open(url)?;
    let mut holder = Handle::new(&client, imp, &name, Some(expire))?;
    if !holder.acquire_timeout(WAITER_TIMEOUT)? {
        return Err(format!("{name} stayed busy").into());
    }
    let mut stdout = std::io::stdout();
    writeln!(stdout, "held")?;
    stdout.flush()?;
    loop {
        thread::sleep(Duration::from_secs(3600));
    }
}

/// The `crash` cell for ours or polling (see the top of this file).
fn run_crash(
    client: &redis::Client,
    url: &str,
    imp: Impl,
    options: &Options,
    server_hz: Option<u64>,
) -> Result<TailCell, Box<dyn std::error::Error>> {
    let expire = Duration::from_millis(options.expire_ms);
    let mut conn = client.get_connection()?;
    let (mut samples, mut pttl_rtts, mut rtts) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..options.trials {
        let name = format!("bench:crash:{}:{}:{i}", imp.name(), std::process::id());
        let key = format!("lock:{name}");
        let mut waiter = Handle::new(client, imp, &name, Some(expire))?;
        thread::sleep(tick_phase(i, server_hz));
        let mut child = Command::new(std::env::current_exe()?)
            .env(ROLE_ENV, imp.name())
            .args([url, &name, &options.expire_ms.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut said = String::new();
        let read = BufReader::new(child.stdout.take().expect("piped stdout")).read_line(&mut said);
        let sent = Instant::now();
        let pttl: redis::RedisResult<i64> = redis::cmd("PTTL").arg(&key).query(&mut conn);
        let received = Instant::now();
        // SIGKILL on Unix: no release, no signal, no destructor.
        let _ = child.kill();
        child.wait()?;
        read?;
        if said.trim() != "held" {
            return Err(format!("the holder did not take {name} (said {said:?})").into());
        }
        let pttl = pttl?;
        if pttl <= 0 {
            return Err(format!("the holder's key has no expiry (PTTL {pttl})").into());
        }
        let expiry = sent + Duration::from_millis(pttl as u64);
        let killed = Instant::now();
        let spread = (i as f64 * GOLDEN).fract() * 0.9;
        thread::sleep(expiry.saturating_duration_since(killed).mul_f64(spread));
        if !waiter.acquire_timeout(WAITER_TIMEOUT)? {
            return Err(format!("the waiter did not get {name} in {WAITER_TIMEOUT:?}").into());
        }
        let got = Instant::now();
        waiter.release()?;
        samples.push(signed_us(got, expiry));
        pttl_rtts.push((received - sent).as_micros() as u64);
        rtts.push(ping(&mut conn)?);
    }
    Ok(TailCell::new(
        CellKind::Crash,
        imp,
        options.expire_ms,
        samples,
        &pttl_rtts,
        rtts,
        server_hz,
        None,
    ))
}

/// The `overshoot` cells for ours or polling: one per `--timeout-ms` value.
fn run_overshoot(
    client: &redis::Client,
    imp: Impl,
    options: &Options,
    server_hz: Option<u64>,
) -> Result<Vec<TailCell>, Box<dyn std::error::Error>> {
    let mut conn = client.get_connection()?;
    let mut cells = Vec::new();
    for &timeout_ms in &options.timeout_ms {
        let timeout = Duration::from_millis(timeout_ms);
        let name = format!(
            "bench:overshoot:{}:{}:{timeout_ms}",
            imp.name(),
            std::process::id()
        );
        let mut holder = Handle::new(client, imp, &name, None)?;
        if !holder.acquire_timeout(Duration::ZERO)? {
            return Err(format!("{name} is busy").into());
        }
        let mut waiter = Handle::new(client, imp, &name, None)?;
        let (mut samples, mut rtts) = (Vec::new(), Vec::new());
        for i in 0..options.trials {
            thread::sleep(tick_phase(i, server_hz));
            let started = Instant::now();
            let got = waiter.acquire_timeout(timeout)?;
            let returned = Instant::now();
            if got {
                return Err(format!("the waiter took {name} while it was held").into());
            }
            samples.push(signed_us(returned, started + timeout));
            rtts.push(ping(&mut conn)?);
        }
        holder.release()?;
        cells.push(TailCell::new(
            CellKind::Overshoot,
            imp,
            timeout_ms,
            samples,
            &[],
            rtts,
            server_hz,
            None,
        ));
    }
    Ok(cells)
}

/// The `crash` or `overshoot` cells for python-redis-lock, run by `pylock_cells.py` in a python
/// child process on the same server; it prints raw samples, the percentiles are computed here.
fn run_python(
    url: &str,
    kind: CellKind,
    options: &Options,
    server_hz: Option<u64>,
) -> Result<Vec<TailCell>, Box<dyn std::error::Error>> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    let cell = if kind == CellKind::Crash {
        "crash"
    } else {
        "overshoot"
    };
    let timeouts: Vec<String> = options.timeout_ms.iter().map(u64::to_string).collect();
    let output = Command::new(&python)
        .args(["-c", PYTHON_CELLS, "--url", url, "--cell", cell])
        .args(["--trials", &options.trials.to_string()])
        .args(["--expire-ms", &options.expire_ms.to_string()])
        .args(["--timeout-ms", &timeouts.join(",")])
        .args(["--hz", &server_hz.unwrap_or(10).to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run {python}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "the python-redis-lock cells failed ({}); they need python3 with redis and \
             python-redis-lock (pip install python-redis-lock)",
            output.status
        )
        .into());
    }
    let mut cells = Vec::new();
    for line in String::from_utf8(output.stdout)?.lines() {
        let v: serde_json::Value = serde_json::from_str(line)?;
        let numbers = |field: &str| -> Vec<i64> {
            v[field]
                .as_array()
                .map(|a| a.iter().filter_map(|n| n.as_i64()).collect())
                .unwrap_or_default()
        };
        let param = if kind == CellKind::Crash {
            "expire_ms"
        } else {
            "timeout_ms"
        };
        let pttl_rtts: Vec<u64> = numbers("pttl_rtt_us").iter().map(|&n| n as u64).collect();
        cells.push(TailCell::new(
            kind,
            Impl::Python,
            v[param]
                .as_u64()
                .ok_or_else(|| format!("python: no {param} in {line}"))?,
            numbers("samples_us"),
            &pttl_rtts,
            numbers("rtt_us").iter().map(|&n| n as u64).collect(),
            server_hz,
            v["note"].as_str().map(str::to_string),
        ));
    }
    Ok(cells)
}
