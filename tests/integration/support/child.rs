//! Other processes a test talks to line by line: this test binary re-run as a child playing a
//! role (see `child_process_role` in `main.rs`), or any other program.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};

/// The role this process plays when a test re-ran the test binary as a child, if any: the
/// role's name, the server's URL and the role's arguments.
pub fn child_role() -> Option<(String, String, Vec<String>)> {
    let role = std::env::var("REDIS_LOCK_TEST_ROLE").ok()?;
    let url = std::env::var("REDIS_LOCK_TEST_URL").expect("REDIS_LOCK_TEST_URL");
    let args = std::env::var("REDIS_LOCK_TEST_ARGS")
        .unwrap_or_default()
        .split('\u{1f}')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    Some((role, url, args))
}

/// Sends `signal` ("STOP", "CONT", "KILL", ...) to process `pid` with kill(1).
pub fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("run kill(1)");
    assert!(status.success(), "kill -{signal} {pid} failed: {status}");
}

/// A child process with its standard input and output piped to the test; killed on drop.
pub struct ChildProcess {
    pub child: Child,
    lines: BufReader<ChildStdout>,
}

impl ChildProcess {
    /// This test binary, running its `child_process_role` test as `role`.
    pub fn spawn(role: &str, url: &str, args: &[&str]) -> ChildProcess {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut command = Command::new(exe);
        command
            .args([
                "--exact",
                "child_process_role",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("REDIS_LOCK_TEST_ROLE", role)
            .env("REDIS_LOCK_TEST_URL", url)
            .env("REDIS_LOCK_TEST_ARGS", args.join("\u{1f}"));
        ChildProcess::run(command).expect("spawn a child test process")
    }

    /// Runs `command` with piped standard input and output (standard error is the test's).
    pub fn run(mut command: Command) -> std::io::Result<ChildProcess> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let lines = BufReader::new(child.stdout.take().expect("piped stdout"));
        Ok(ChildProcess { child, lines })
    }

    /// Blocks until the child prints `marker`, and returns the rest of that line from it (the
    /// test harness may have printed `test child_process_role ... ` in front).
    pub fn expect_line(&mut self, marker: &str) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self
                .lines
                .read_line(&mut line)
                .expect("read the child's output");
            assert!(n > 0, "the child exited before printing {marker:?}");
            if let Some(at) = line.find(marker) {
                return line[at..].trim_end().to_string();
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends the child a signal ("STOP", "CONT", "KILL", ...).
    pub fn signal(&self, signal: &str) {
        send_signal(self.pid(), signal);
    }

    /// Sends the child one line on its standard input.
    pub fn send_line(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().expect("piped stdin");
        writeln!(stdin, "{line}").expect("write to the child");
        stdin.flush().expect("flush to the child");
    }

    pub fn wait_success(mut self) {
        let status = self.child.wait().expect("wait for the child");
        assert!(status.success(), "child failed: {status}");
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of `name=value` in a line a child printed (values without spaces).
pub fn field<'a>(line: &'a str, name: &str) -> &'a str {
    line.split(' ')
        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
}
