//! The Lua scripts in `scripts/`, run by SHA with a fallback to the full text when the server
//! has forgotten them (`SCRIPT FLUSH`, a restart, a failover).

use std::sync::LazyLock;

use redis::{Cmd, Connection, ErrorKind, FromRedisValue, RedisResult, ServerErrorKind};

pub(crate) struct LuaScript {
    code: &'static str,
    sha: String,
}

impl LuaScript {
    fn new(code: &'static str) -> Self {
        let sha = redis::Script::new(code).get_hash().to_owned();
        LuaScript { code, sha }
    }

    /// `EVALSHA` with the keys and arguments that `fill` appends, for use in a pipeline.
    pub(crate) fn evalsha(&self, fill: impl Fn(&mut Cmd)) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.sha);
        fill(&mut cmd);
        cmd
    }

    /// Runs the script; when the server answers NOSCRIPT, sends the text with `EVAL`, which
    /// also caches it for the next `EVALSHA`.
    pub(crate) fn run<T: FromRedisValue>(
        &self,
        conn: &mut Connection,
        fill: impl Fn(&mut Cmd),
    ) -> RedisResult<T> {
        match self.evalsha(&fill).query(conn) {
            Err(e) if is_noscript(&e) => self.eval(&fill).query(conn),
            result => result,
        }
    }

    fn eval(&self, fill: impl Fn(&mut Cmd)) -> Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(self.code);
        fill(&mut cmd);
        cmd
    }
}

pub(crate) fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

pub(crate) static ACQUIRE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("../scripts/acquire.lua")));
pub(crate) static UNLOCK: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("../scripts/unlock.lua")));
pub(crate) static EXTEND: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("../scripts/extend.lua")));
pub(crate) static RESET: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("../scripts/reset.lua")));
pub(crate) static RESET_ALL: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("../scripts/reset_all.lua")));
