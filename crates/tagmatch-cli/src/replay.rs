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
    Arrived, Config, Engine, Envelope, MsgHandle, Posted, RecvHandle, RecvSpec, Source, TagSel,
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
enum RecvState {
    Pending(RecvHandle),
    Done,
}

/// State of a probe id.
enum ProbeState {
    /// An mprobe that claimed a message.
    Claimed(MsgHandle),
    /// A probe, an mprobe that found nothing, or a claim already received.
    Done,
}

/// The replay machine: engine plus the id tables of the trace.
struct Replay {
    engine: Engine<String, String>,
    recvs: HashMap<String, RecvState>,
    msgs: HashMap<String, ()>,
    probes: HashMap<String, ProbeState>,
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
    let comm_s = need("comm", comm)?;
    let comm = comm_s
        .parse::<u32>()
        .map_err(|_| format!("comm={comm_s}: expected an integer 0..=4294967295"))?;
    let src_s = need("src", src)?;
    let src = match src_s {
        "*" if wildcards => None,
        "*" => return Err("src=*: a message has a definite source".into()),
        s => Some(
            s.parse::<u32>()
                .map_err(|_| format!("src={s}: expected an integer 0..=4294967295 or *"))?,
        ),
    };
    let tag_s = need("tag", tag)?;
    let tag = match tag_s {
        "*" if wildcards => None,
        "*" => return Err("tag=*: a message has a definite tag".into()),
        t => Some(
            t.parse::<u64>()
                .map_err(|_| format!("tag={t}: expected a non-negative integer or *"))?,
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

impl Replay {
    fn new() -> Self {
        let cfg = Config::default()
            .max_bytes(usize::MAX)
            .max_messages(usize::MAX)
            .max_posted(usize::MAX);
        Replay {
            engine: Engine::new(cfg),
            recvs: HashMap::new(),
            msgs: HashMap::new(),
            probes: HashMap::new(),
        }
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
        let id = |n: usize| -> Result<&str, String> {
            args.get(n)
                .copied()
                .ok_or_else(|| format!("{op}: missing identifier"))
        };
        match *op {
            "post" => {
                let rid = id(0)?;
                self.new_recv_id(rid)?;
                let (c, s, t) = fields(&args[1..], true).map_err(|e| format!("post: {e}"))?;
                match self.engine.post(spec_of(c, s, t), rid.to_string()) {
                    Ok(Posted::Matched(m)) => {
                        self.recvs.insert(rid.to_string(), RecvState::Done);
                        out.push(format!("match {} {}", m.recv, m.msg));
                    }
                    Ok(Posted::Pending(h)) => {
                        self.recvs.insert(rid.to_string(), RecvState::Pending(h));
                    }
                    Err(_) => return Err("post: posted-receive limit reached".into()),
                }
            }
            "arrive" => {
                let mid = id(0)?;
                if self.msgs.contains_key(mid) {
                    return Err(format!("message id {mid} already used"));
                }
                let (c, s, t) = fields(&args[1..], false).map_err(|e| format!("arrive: {e}"))?;
                let env = Envelope::new(c, s.unwrap_or(0), t.unwrap_or(0));
                self.msgs.insert(mid.to_string(), ());
                match self.engine.arrive(env, 0, mid.to_string()) {
                    Ok(Arrived::Matched(m)) => {
                        if let Some(st) = self.recvs.get_mut(&m.recv) {
                            *st = RecvState::Done;
                        }
                        out.push(format!("match {} {}", m.recv, m.msg));
                    }
                    Ok(Arrived::Unexpected(_)) => {}
                    Err(r) => return Err(format!("arrive: {}", r.reason)),
                }
            }
            "probe" | "mprobe" => {
                let pid = id(0)?;
                self.new_probe_id(pid)?;
                let (c, s, t) = fields(&args[1..], true).map_err(|e| format!("{op}: {e}"))?;
                let spec = spec_of(c, s, t);
                let (found, state) = if *op == "probe" {
                    (
                        self.engine.probe(&spec).map(|p| p.msg.clone()),
                        ProbeState::Done,
                    )
                } else {
                    match self.engine.mprobe(&spec) {
                        Some(cl) => (
                            self.engine.claimed(cl.handle).ok().cloned(),
                            ProbeState::Claimed(cl.handle),
                        ),
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
                let m = self
                    .engine
                    .mrecv(h)
                    .map_err(|e| format!("mrecv: {pid}: {e}"))?;
                self.probes.insert(pid.to_string(), ProbeState::Done);
                self.recvs.insert(rid.to_string(), RecvState::Done);
                out.push(format!("match {rid} {}", m.msg));
            }
            "cancel" => {
                let rid = id(0)?;
                if args.len() > 1 {
                    return Err(format!("cancel: unexpected field {:?}", args[1]));
                }
                let ok = match self.recvs.get(rid) {
                    None => return Err(format!("cancel: receive id {rid} was never posted")),
                    Some(RecvState::Done) => false,
                    Some(RecvState::Pending(h)) => self.engine.cancel(*h).is_ok(),
                };
                self.recvs.insert(rid.to_string(), RecvState::Done);
                out.push(format!("cancel {rid} {}", if ok { "ok" } else { "failed" }));
            }
            other => return Err(format!("unknown operation {other:?} ({OPS})")),
        }
        Ok(())
    }
}

/// Runs a whole trace from `input`, writing event lines to `out`. On a bad line returns
/// `line <n>: <message>` after writing the lines before it.
pub fn replay(input: impl Read, out: &mut impl Write) -> Result<Engine<String, String>, String> {
    let mut r = Replay::new();
    let mut lines = Vec::new();
    for (n, line) in BufReader::new(input).lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: reading: {e}", n + 1))?;
        let text = line.split('#').next().unwrap_or("");
        let toks: Vec<&str> = text.split_whitespace().collect();
        if toks.is_empty() {
            continue;
        }
        lines.clear();
        let res = r.line(&toks, &mut lines);
        for l in &lines {
            writeln!(out, "{l}").map_err(|e| format!("writing stdout: {e}"))?;
        }
        res.map_err(|e| format!("line {}: {e}", n + 1))?;
    }
    let c = r.engine.counters();
    writeln!(
        out,
        "end posted={} unexpected={}",
        c.posted_depth, c.unexpected_depth
    )
    .map_err(|e| format!("writing stdout: {e}"))?;
    Ok(r.engine)
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
