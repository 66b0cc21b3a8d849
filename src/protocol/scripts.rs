//! The Lua scripts in `scripts/`, sent by SHA; the text follows only when the server has
//! forgotten them (`SCRIPT FLUSH`, a restart, a failover), which it says with `NOSCRIPT`.

use std::sync::LazyLock;

use redis::Cmd;

pub(crate) struct Script {
    code: &'static str,
    sha: String,
}

impl Script {
    fn new(code: &'static str) -> Self {
        let sha = redis::Script::new(code).get_hash().to_owned();
        Script { code, sha }
    }

    /// `EVALSHA` with `keys` and `args`.
    pub(crate) fn evalsha(&self, keys: &[&[u8]], args: &[&[u8]]) -> Cmd {
        self.command("EVALSHA", &self.sha, keys, args)
    }

    /// `EVAL` with the script's text, `keys` and `args`: for a connection that cannot answer
    /// `NOSCRIPT` by sending the text again (a small script, sent rarely).
    pub(crate) fn eval(&self, keys: &[&[u8]], args: &[&[u8]]) -> Cmd {
        self.command("EVAL", self.code, keys, args)
    }

    /// The call `evalsha` made, with the script's text instead of its SHA, for a server that
    /// answered `NOSCRIPT`. Built only then: the text is not copied on every call.
    pub(crate) fn eval_of(&self, evalsha: &Cmd) -> Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(self.code);
        // After EVALSHA and the SHA: the key count, the keys and the arguments.
        for arg in evalsha.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                cmd.arg(bytes);
            }
        }
        cmd
    }

    fn command(&self, verb: &str, script: &str, keys: &[&[u8]], args: &[&[u8]]) -> Cmd {
        let mut cmd = redis::cmd(verb);
        cmd.arg(script).arg(keys.len()).arg(keys).arg(args);
        cmd
    }
}

pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../scripts/acquire.lua")));
pub(crate) static UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../scripts/unlock.lua")));
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../scripts/extend.lua")));
pub(crate) static GIVE_BACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../scripts/give_back.lua")));
pub(crate) static RESET: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../scripts/reset.lua")));
pub(crate) static RESET_ALL: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../scripts/reset_all.lua")));
pub(crate) static QUEUE_BEAT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../scripts/queue_beat.lua")));

/// A fair queue engine script: the engine's head (keys, clock, number helpers), then the
/// parts named: a script's fast part when it has one, the engine's reads, the engine, the
/// script's own part. Lua creates a part's closures only when it reaches them, so a call its
/// fast part answers does not pay for the engine's, and `queue_extend`, which needs only the
/// reads, never does.
macro_rules! queue_script {
    ($($part:literal),+) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../../scripts/queue_head.lua"),
                $(include_str!(concat!("../../scripts/", $part))),+
            ))
        })
    };
}
pub(crate) static QUEUE_ACQUIRE: LazyLock<Script> = queue_script!(
    "queue_acquire_fast.lua",
    "queue_reads.lua",
    "queue_engine.lua",
    "queue_acquire.lua"
);
pub(crate) static QUEUE_RELEASE: LazyLock<Script> = queue_script!(
    "queue_release_fast.lua",
    "queue_reads.lua",
    "queue_engine.lua",
    "queue_release.lua"
);
pub(crate) static QUEUE_EXTEND: LazyLock<Script> =
    queue_script!("queue_reads.lua", "queue_extend.lua");
pub(crate) static QUEUE_SHRINK: LazyLock<Script> =
    queue_script!("queue_reads.lua", "queue_engine.lua", "queue_shrink.lua");
pub(crate) static QUEUE_RESET: LazyLock<Script> =
    queue_script!("queue_reads.lua", "queue_engine.lua", "queue_reset.lua");
pub(crate) static QUEUE_STATE: LazyLock<Script> =
    queue_script!("queue_reads.lua", "queue_engine.lua", "queue_state.lua");
pub(crate) static QUEUE_RESET_ALL: LazyLock<Script> = queue_script!("queue_reset_all.lua");
pub(crate) static ELECTION_ANNOUNCE: LazyLock<Script> =
    queue_script!("election_watchers.lua", "election_announce.lua");
pub(crate) static ELECTION_VACATE: LazyLock<Script> =
    queue_script!("election_watchers.lua", "election_vacate.lua");
pub(crate) static ELECTION_READ: LazyLock<Script> = queue_script!("election_read.lua");
