//! `tagmatch replay <TRACE|->`: runs a text trace of receive/arrival operations through
//! `tagmatch-engine` and prints what happened, one line per event, so any MPI
//! implementation's behaviour can be compared line by line.
//!
//! Input, one operation per line, `#` starts a comment, fields separated by spaces:
//!
//! ```text
//! post   <rid> comm=<c> src=<s|*> tag=<t|*>   # receive posted
//! arrive <mid> comm=<c> src=<s> tag=<t>       # message arrives (in send order per source)
//! probe  <pid> comm=<c> src=<s|*> tag=<t|*>
//! mprobe <pid> comm=<c> src=<s|*> tag=<t|*>
//! mrecv  <rid> <pid>
//! cancel <rid>
//! ```
//!
//! Output: `match <rid> <mid>` whenever a receive and a message are paired (by post,
//! arrive or mrecv); `probe <pid> <mid>|none`; `mprobe <pid> <mid>|none`;
//! `cancel <rid> ok|failed`; last `end posted=<n> unexpected=<n>` (claimed messages are
//! not counted as unexpected). A bad line stops the replay with status 1 and
//! `tagmatch: replay: line <n>: <what is wrong>` on stderr (lines printed before it stay).
//! Identifiers are unique per kind: a receive id names one receive, a message id one
//! message, a probe id one probe. `--stats` prints the engine counters as one JSON object
//! on stderr.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;

use tagmatch_engine::{
    Arrived, Config, Counters, Engine, Envelope, MsgHandle, Posted, RecvHandle, RecvSpec, Source,
    TagSel,
};

use crate::Error;

mod hw;
pub use hw::offload_json;

/// Arguments of `tagmatch replay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The trace file, or `-` for stdin.
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// Print the engine counters as JSON on stderr at the end.
    #[arg(long)]
    pub stats: bool,
    /// Run through the offload driver and a TM-SRQ model with N hardware tags (0: the
    /// driver in software only); the output is the software run's.
    #[arg(long, value_name = "N")]
    pub hw_tags: Option<u32>,
    /// Seed of the model's random operation-completion timing (with --hw-tags).
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
}

/// The operations a trace line may start with.
const OPS: &str = "expected post, arrive, probe, mprobe, mrecv, cancel";

/// State of a receive id.
enum RecvState<H> {
    Pending(H),
    Done,
}

/// State of a probe id.
enum ProbeState {
    /// An mprobe that claimed a message.
    Claimed(MsgHandle),
    /// A probe, an mprobe that found nothing, or a claim already received.
    Done,
}

/// A pairing or cancellation a [`Runner`] reports (at once, or when it completes later).
enum Outcome {
    /// Receive id `.0` matched message id `.1`.
    Match(String, String),
    /// Receive id `.0` was cancelled.
    Cancelled(String),
}

/// What a trace runs on: the engine ([`SwRunner`]) or the offload driver
/// (`hw::HwRunner`). Receive and message ids are the trace's.
trait Runner {
    /// A pending receive.
    type Handle: Copy;
    /// Posts a receive: `Ok(Some(_))` if it is pending (a match goes to `fx`), `Err(())`
    /// if the posted-receive limit is reached.
    fn post(
        &mut self,
        spec: RecvSpec,
        rid: &str,
        fx: &mut Vec<Outcome>,
    ) -> Result<Option<Self::Handle>, ()>;
    /// A message arrives (a match goes to `fx`).
    fn arrive(&mut self, env: Envelope, mid: &str, fx: &mut Vec<Outcome>) -> Result<(), String>;
    /// The message id a probe finds.
    fn probe(&mut self, spec: &RecvSpec) -> Option<String>;
    /// Claims a message: its handle and id.
    fn mprobe(&mut self, spec: &RecvSpec) -> Option<(MsgHandle, Option<String>)>;
    /// Receives a claimed message: its id, or the error's text.
    fn mrecv(&mut self, h: MsgHandle) -> Result<String, String>;
    /// Cancels a pending receive: `Some(cancelled)` when decided at once, `None` when an
    /// [`Outcome::Cancelled`] in `fx` decides (none: failed).
    fn cancel(&mut self, h: Self::Handle, fx: &mut Vec<Outcome>) -> Result<Option<bool>, String>;
    /// Runs after every trace line that succeeded.
    fn after_line(&mut self, _fx: &mut Vec<Outcome>) -> Result<(), String> {
        Ok(())
    }
    /// Runs after the last trace line.
    fn finish(&mut self, _fx: &mut Vec<Outcome>) -> Result<(), String> {
        Ok(())
    }
    /// The engine's counters.
    fn counters(&self) -> Counters;
}

/// The software engine as a [`Runner`].
struct SwRunner(Engine<String, String>);

impl Runner for SwRunner {
    type Handle = RecvHandle;

    fn post(
        &mut self,
        spec: RecvSpec,
        rid: &str,
        fx: &mut Vec<Outcome>,
    ) -> Result<Option<RecvHandle>, ()> {
        match self.0.post(spec, rid.to_string()) {
            Ok(Posted::Matched(m)) => {
                fx.push(Outcome::Match(m.recv, m.msg));
                Ok(None)
            }
            Ok(Posted::Pending(h)) => Ok(Some(h)),
            Err(_) => Err(()),
        }
    }

    fn arrive(&mut self, env: Envelope, mid: &str, fx: &mut Vec<Outcome>) -> Result<(), String> {
        match self.0.arrive(env, 0, mid.to_string()) {
            Ok(Arrived::Matched(m)) => fx.push(Outcome::Match(m.recv, m.msg)),
            Ok(Arrived::Unexpected(_)) => {}
            Err(r) => return Err(format!("arrive: {}", r.reason)),
        }
        Ok(())
    }

    fn probe(&mut self, spec: &RecvSpec) -> Option<String> {
        self.0.probe(spec).map(|p| p.msg.clone())
    }

    fn mprobe(&mut self, spec: &RecvSpec) -> Option<(MsgHandle, Option<String>)> {
        let cl = self.0.mprobe(spec)?;
        Some((cl.handle, self.0.claimed(cl.handle).ok().cloned()))
    }

    fn mrecv(&mut self, h: MsgHandle) -> Result<String, String> {
        self.0.mrecv(h).map(|m| m.msg).map_err(|e| e.to_string())
    }

    fn cancel(&mut self, h: RecvHandle, _fx: &mut Vec<Outcome>) -> Result<Option<bool>, String> {
        Ok(Some(self.0.cancel(h).is_ok()))
    }

    fn counters(&self) -> Counters {
        self.0.counters()
    }
}

/// The replay machine: a runner plus the id tables of the trace.
struct Replay<R: Runner> {
    runner: R,
    recvs: HashMap<String, RecvState<R::Handle>>,
    msgs: HashMap<String, ()>,
    probes: HashMap<String, ProbeState>,
    fx: Vec<Outcome>,
}

/// Parses `key=value` fields `comm`, `src` and `tag` (each exactly once, any order).
fn fields(rest: &[&str], wildcards: bool) -> Result<(u32, Option<u32>, Option<u64>), String> {
    let (mut comm, mut src, mut tag) = (None, None, None);
    for f in rest {
        let (k, v) = f
            .split_once('=')
            .ok_or_else(|| format!("expected key=value, found {f:?}"))?;
        let slot = match k {
            "comm" => &mut comm,
            "src" => &mut src,
            "tag" => &mut tag,
            _ => return Err(format!("unknown field {k:?} (expected comm, src, tag)")),
        };
        if slot.is_some() {
            return Err(format!("field {k:?} given twice"));
        }
        *slot = Some(v);
    }
    fn need<'a>(name: &str, v: Option<&'a str>) -> Result<&'a str, String> {
        v.ok_or_else(|| format!("missing field {name}="))
    }
    /// A decimal number: digits only (Rust's `parse` would also take a leading `+`).
    fn number<T: core::str::FromStr>(s: &str) -> Option<T> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    }
    let comm_s = need("comm", comm)?;
    let comm = number::<u32>(comm_s)
        .ok_or_else(|| format!("comm={comm_s}: expected an integer 0..=4294967295"))?;
    let src_s = need("src", src)?;
    let src = match src_s {
        "*" if wildcards => None,
        "*" => return Err("src=*: a message has a definite source".into()),
        s => Some(
            number::<u32>(s)
                .ok_or_else(|| format!("src={s}: expected an integer 0..=4294967295 or *"))?,
        ),
    };
    let tag_s = need("tag", tag)?;
    let tag = match tag_s {
        "*" if wildcards => None,
        "*" => return Err("tag=*: a message has a definite tag".into()),
        t => Some(
            number::<u64>(t)
                .ok_or_else(|| format!("tag={t}: expected a non-negative integer or *"))?,
        ),
    };
    Ok((comm, src, tag))
}

fn spec_of(comm: u32, src: Option<u32>, tag: Option<u64>) -> RecvSpec {
    RecvSpec {
        comm,
        src: src.map_or(Source::Any, Source::Rank),
        tag: tag.map_or(TagSel::Any, TagSel::Exact),
    }
}

/// The engine configuration of a replay: no limits.
fn unlimited() -> Config {
    Config::default()
        .max_bytes(usize::MAX)
        .max_messages(usize::MAX)
        .max_posted(usize::MAX)
}

impl<R: Runner> Replay<R> {
    fn new(runner: R) -> Self {
        Replay {
            runner,
            recvs: HashMap::new(),
            msgs: HashMap::new(),
            probes: HashMap::new(),
            fx: Vec::new(),
        }
    }

    /// Turns the runner's outcomes into output lines.
    fn emit(&mut self, out: &mut Vec<String>) {
        for o in self.fx.drain(..) {
            match o {
                Outcome::Match(recv, msg) => {
                    out.push(format!("match {recv} {msg}"));
                    self.recvs.insert(recv, RecvState::Done);
                }
                Outcome::Cancelled(recv) => {
                    out.push(format!("cancel {recv} ok"));
                    self.recvs.insert(recv, RecvState::Done);
                }
            }
        }
    }

    /// Runs the runner's step after a line, or at the end.
    fn step(
        &mut self,
        out: &mut Vec<String>,
        f: fn(&mut R, &mut Vec<Outcome>) -> Result<(), String>,
    ) -> Result<(), String> {
        let res = f(&mut self.runner, &mut self.fx);
        self.emit(out);
        res
    }

    fn new_recv_id(&self, rid: &str) -> Result<(), String> {
        if self.recvs.contains_key(rid) {
            return Err(format!("receive id {rid} already used"));
        }
        Ok(())
    }

    fn new_probe_id(&self, pid: &str) -> Result<(), String> {
        if self.probes.contains_key(pid) {
            return Err(format!("probe id {pid} already used"));
        }
        Ok(())
    }

    /// Runs one non-empty, comment-stripped line; pushes output lines to `out`.
    fn line(&mut self, toks: &[&str], out: &mut Vec<String>) -> Result<(), String> {
        let (op, args) = toks.split_first().ok_or("empty line")?;
        // An identifier is any token without `=`: `post comm=0 …` lacks its id (taking
        // `comm=0` for it would report the fields wrongly).
        let id = |n: usize| -> Result<&str, String> {
            match args.get(n).copied() {
                None => Err(format!("{op}: missing identifier")),
                Some(t) if t.contains('=') => Err(format!(
                    "{op}: missing identifier (found the field {t:?} where the identifier goes)"
                )),
                Some(t) => Ok(t),
            }
        };
        match *op {
            "post" => {
                let rid = id(0)?;
                self.new_recv_id(rid)?;
                let (c, s, t) = fields(&args[1..], true).map_err(|e| format!("post: {e}"))?;
                let res = self.runner.post(spec_of(c, s, t), rid, &mut self.fx);
                if let Ok(Some(h)) = res {
                    self.recvs.insert(rid.to_string(), RecvState::Pending(h));
                }
                self.emit(out);
                res.map_err(|()| "post: posted-receive limit reached")?;
            }
            "arrive" => {
                let mid = id(0)?;
                if self.msgs.contains_key(mid) {
                    return Err(format!("message id {mid} already used"));
                }
                let (c, s, t) = fields(&args[1..], false).map_err(|e| format!("arrive: {e}"))?;
                let env = Envelope::new(c, s.unwrap_or(0), t.unwrap_or(0));
                self.msgs.insert(mid.to_string(), ());
                let res = self.runner.arrive(env, mid, &mut self.fx);
                self.emit(out);
                res?;
            }
            "probe" | "mprobe" => {
                let pid = id(0)?;
                self.new_probe_id(pid)?;
                let (c, s, t) = fields(&args[1..], true).map_err(|e| format!("{op}: {e}"))?;
                let spec = spec_of(c, s, t);
                let (found, state) = if *op == "probe" {
                    (self.runner.probe(&spec), ProbeState::Done)
                } else {
                    match self.runner.mprobe(&spec) {
                        Some((h, found)) => (found, ProbeState::Claimed(h)),
                        None => (None, ProbeState::Done),
                    }
                };
                self.probes.insert(pid.to_string(), state);
                out.push(format!("{op} {pid} {}", found.as_deref().unwrap_or("none")));
            }
            "mrecv" => {
                let rid = id(0)?;
                let pid = id(1)?;
                if args.len() > 2 {
                    return Err(format!("mrecv: unexpected field {:?}", args[2]));
                }
                self.new_recv_id(rid)?;
                let h = match self.probes.get(pid) {
                    None => return Err(format!("mrecv: probe id {pid} was never mprobed")),
                    Some(ProbeState::Done) => {
                        return Err(format!("mrecv: probe id {pid} holds no claimed message"))
                    }
                    Some(ProbeState::Claimed(h)) => *h,
                };
                let msg = self
                    .runner
                    .mrecv(h)
                    .map_err(|e| format!("mrecv: {pid}: {e}"))?;
                self.probes.insert(pid.to_string(), ProbeState::Done);
                self.recvs.insert(rid.to_string(), RecvState::Done);
                out.push(format!("match {rid} {msg}"));
            }
            "cancel" => {
                let rid = id(0)?;
                if args.len() > 1 {
                    return Err(format!("cancel: unexpected field {:?}", args[1]));
                }
                match self.recvs.get(rid) {
                    None => return Err(format!("cancel: receive id {rid} was never posted")),
                    Some(RecvState::Done) => out.push(format!("cancel {rid} failed")),
                    Some(&RecvState::Pending(h)) => {
                        let res = self.runner.cancel(h, &mut self.fx);
                        let before = out.len();
                        self.emit(out);
                        match res? {
                            Some(ok) => out
                                .push(format!("cancel {rid} {}", if ok { "ok" } else { "failed" })),
                            // An outcome decides: `emit` printed it if the receive was
                            // cancelled.
                            None => {
                                let done = format!("cancel {rid} ");
                                if !out[before..].iter().any(|l| l.starts_with(&done)) {
                                    out.push(format!("cancel {rid} failed"));
                                }
                            }
                        }
                    }
                }
                self.recvs.insert(rid.to_string(), RecvState::Done);
            }
            other => return Err(format!("unknown operation {other:?} ({OPS})")),
        }
        Ok(())
    }
}

/// Runs a whole trace from `input`, writing event lines to `out`. On a bad line returns
/// `line <n>: <message>` after writing the lines before it.
pub fn replay(input: impl Read, out: &mut impl Write) -> Result<Engine<String, String>, String> {
    run_trace(SwRunner(Engine::new(unlimited())), input, out).map(|r| r.0)
}

/// Writes output lines to `out`.
fn write_lines(out: &mut impl Write, lines: &[String]) -> Result<(), String> {
    for l in lines {
        writeln!(out, "{l}").map_err(|e| format!("writing stdout: {e}"))?;
    }
    Ok(())
}

/// Runs a whole trace from `input` on `runner`, writing event lines to `out`; returns the
/// runner. On a bad line returns `line <n>: <message>` after writing the lines before it.
fn run_trace<R: Runner>(runner: R, input: impl Read, out: &mut impl Write) -> Result<R, String> {
    let mut r = Replay::new(runner);
    let mut lines = Vec::new();
    for (n, line) in BufReader::new(input).lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: reading: {e}", n + 1))?;
        let text = line.split('#').next().unwrap_or("");
        let toks: Vec<&str> = text.split_whitespace().collect();
        if toks.is_empty() {
            continue;
        }
        lines.clear();
        let res = r
            .line(&toks, &mut lines)
            .and_then(|()| r.step(&mut lines, R::after_line));
        write_lines(out, &lines)?;
        res.map_err(|e| format!("line {}: {e}", n + 1))?;
    }
    lines.clear();
    r.step(&mut lines, R::finish)
        .map_err(|e| format!("end: {e}"))?;
    write_lines(out, &lines)?;
    let c = r.runner.counters();
    writeln!(
        out,
        "end posted={} unexpected={}",
        c.posted_depth, c.unexpected_depth
    )
    .map_err(|e| format!("writing stdout: {e}"))?;
    Ok(r.runner)
}

/// The engine counters as a JSON object.
pub fn counters_json<R, M>(e: &Engine<R, M>) -> serde_json::Value {
    let c = e.counters();
    serde_json::json!({
        "posted_depth": c.posted_depth,
        "unexpected_depth": c.unexpected_depth,
        "claimed_depth": c.claimed_depth,
        "reorder_depth": c.reorder_depth,
        "bytes_held": c.bytes_held,
        "match_attempts": c.match_attempts,
        "hits": c.hits,
        "misses": c.misses,
        "cancelled": c.cancelled,
        "rejected_backpressure": c.rejected_backpressure,
        "rejected_sequence": c.rejected_sequence,
        "heap_bytes": e.heap_bytes(),
    })
}

/// Runs `tagmatch replay`.
pub fn run(args: Args) -> Result<(), Error> {
    let fail = |e: String| Error::new("replay", e);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let run_on = |input: &mut dyn Read, out: &mut std::io::BufWriter<_>| match args.hw_tags {
        Some(n) => hw::replay(input, out, n, args.seed),
        None => replay(input, out).map(|e| counters_json(&e)),
    };
    let result = if args.trace.as_os_str() == "-" {
        run_on(&mut std::io::stdin().lock(), &mut out)
    } else {
        let mut f = std::fs::File::open(&args.trace)
            .map_err(|e| fail(format!("reading {}: {e}", args.trace.display())))?;
        run_on(&mut f, &mut out)
    };
    out.flush()
        .map_err(|e| fail(format!("writing stdout: {e}")))?;
    let stats = result.map_err(fail)?;
    if args.stats {
        let mut err = std::io::stderr().lock();
        writeln!(err, "{stats}").map_err(|e| fail(format!("writing stderr: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_str(t: &str) -> (String, Result<(), String>) {
        let mut out = Vec::new();
        let r = replay(t.as_bytes(), &mut out).map(|_| ());
        (String::from_utf8(out).unwrap(), r)
    }

    #[test]
    fn fields_in_any_order_and_errors() {
        assert_eq!(
            fields(&["tag=3", "comm=1", "src=*"], true),
            Ok((1, None, Some(3)))
        );
        assert!(fields(&["comm=1", "src=*", "tag=1"], false).is_err());
        assert!(fields(&["comm=1", "src=2"], true)
            .unwrap_err()
            .contains("tag"));
        assert!(fields(&["comm=1", "src=2", "tag=-1"], true)
            .unwrap_err()
            .contains("non-negative"));
        assert!(fields(&["comm=1", "comm=1", "src=2", "tag=1"], true)
            .unwrap_err()
            .contains("twice"));
    }

    #[test]
    fn small_trace() {
        let (out, r) = run_str("post r1 comm=0 src=* tag=*\narrive m1 comm=0 src=1 tag=2\n");
        assert_eq!(r, Ok(()));
        assert_eq!(out, "match r1 m1\nend posted=0 unexpected=0\n");
    }
}
