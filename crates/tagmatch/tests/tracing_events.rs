//! The `tracing` events the crate docs promise, seen by a subscriber: the protocol
//! endpoint's choice of subprotocol per send (`tagmatch_rdm`, `debug`), the facade's event
//! per operation (`trace`) and per completion (`debug` with the subprotocol when the
//! protocol chose one, `trace` otherwise), and the `wait` span around what a wait drives.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use tagmatch::{Endpoint, MemFabric, Protocol, TagMatch, ANY_SOURCE};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// Field names to their values (`Debug` of the value; strings unquoted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Fields {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

/// One captured event.
#[derive(Debug, Clone)]
struct Record {
    level: Level,
    target: String,
    /// The event's fields, `message` included.
    fields: Fields,
    /// The spans it happened in, innermost first: name and fields.
    spans: Vec<(&'static str, Fields)>,
}

impl Record {
    fn message(&self) -> &str {
        self.fields.get("message").unwrap_or("")
    }
}

/// A layer that keeps every event.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Record>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let spans = ctx
            .event_scope(event)
            .map(|scope| {
                scope
                    .map(|s| {
                        let f = s.extensions().get::<Fields>().cloned().unwrap_or_default();
                        (s.name(), f)
                    })
                    .collect()
            })
            .unwrap_or_default();
        self.0.lock().unwrap().push(Record {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            fields,
            spans,
        });
    }
}

/// Runs `f` with a capturing subscriber as this thread's default; returns what it saw.
fn capture(f: impl FnOnce()) -> Vec<Record> {
    let cap = Capture::default();
    let subscriber = tracing_subscriber::registry().with(cap.clone());
    tracing::subscriber::with_default(subscriber, f);
    let records = cap.0.lock().unwrap().clone();
    records
}

const LONG: usize = 1 << 20;

#[test]
fn send_decisions_and_completions_carry_their_subprotocol() {
    let fabric = MemFabric::new();
    // The protocol path (the fast path would bypass the subprotocols).
    let mut a = Endpoint::builder()
        .mem(&fabric)
        .fast_path(false)
        .build()
        .unwrap();
    let mut b = Endpoint::builder()
        .mem(&fabric)
        .fast_path(false)
        .build()
        .unwrap();
    let peer = a.insert_peer(&b.address()).unwrap();

    let mut ids = Vec::new();
    let records = capture(|| {
        for (tag, len) in [(5u64, 8usize), (6, LONG)] {
            let r = b.trecv(ANY_SOURCE, TagMatch::exact(tag), len).unwrap();
            let s = a.tsend(peer, tag, vec![tag as u8; len]).unwrap();
            let got = b.wait_with(r, &mut [&mut a]).unwrap();
            assert_eq!(got.data, vec![tag as u8; len]);
            a.wait_with(s, &mut [&mut b]).unwrap();
            ids.push((tag, len, s.id(), r.id()));
        }
    });
    // What the events say agrees with the counters.
    let st = a.stats().facade;
    assert_eq!(
        (
            st.protocol(Protocol::Eager),
            st.protocol(Protocol::LongRead)
        ),
        (1, 1)
    );

    for (tag, len, send, recv) in ids {
        let proto = if len == LONG { "LongRead" } else { "Eager" };
        let op = format!("{:?}", tagmatch_rdm::OpId(send));

        // The facade's event for the operation.
        let posted: Vec<_> = records
            .iter()
            .filter(|r| r.message() == "tsend" && r.fields.get("tag") == Some(&*tag.to_string()))
            .collect();
        assert_eq!(posted.len(), 1, "one tsend event for tag {tag}: {posted:?}");
        assert_eq!(posted[0].level, Level::TRACE);
        assert!(posted[0].target.starts_with("tagmatch::"), "{posted:?}");
        assert_eq!(posted[0].fields.get("len"), Some(&*len.to_string()));
        assert_eq!(posted[0].fields.get("peer"), Some("0"));

        // The protocol endpoint's decision.
        let decided: Vec<_> = records
            .iter()
            .filter(|r| r.message() == "send" && r.fields.get("op") == Some(&*op))
            .collect();
        assert_eq!(decided.len(), 1, "one decision for {op}: {decided:?}");
        let d = decided[0];
        assert_eq!(d.level, Level::DEBUG);
        assert!(d.target.starts_with("tagmatch_rdm::"), "{d:?}");
        assert_eq!(d.fields.get("proto"), Some(proto), "{d:?}");
        assert_eq!(d.fields.get("len"), Some(&*len.to_string()));

        // The sender's completion: `debug`, with the subprotocol.
        let sent: Vec<_> = records
            .iter()
            .filter(|r| {
                r.message() == "complete"
                    && r.fields.get("op") == Some(&*send.to_string())
                    && r.fields.get("kind") == Some("Send")
            })
            .collect();
        assert_eq!(sent.len(), 1, "one completion event for send {send}");
        let c = sent[0];
        assert_eq!(c.level, Level::DEBUG);
        assert!(c.target.starts_with("tagmatch::"), "{c:?}");
        assert_eq!(
            (c.fields.get("protocol"), c.fields.get("ok")),
            (Some(proto), Some("true")),
            "{c:?}"
        );
        assert_eq!(c.fields.get("len"), Some(&*len.to_string()));

        // The receiver's completion: the protocol endpoint records no subprotocol for a
        // receive, so it is a `trace` event without one; it happened inside the wait for
        // it (`b.wait_with(r, ..)`), whose span names the request.
        let got: Vec<_> = records
            .iter()
            .filter(|r| {
                r.message() == "complete"
                    && r.fields.get("op") == Some(&*recv.to_string())
                    && r.fields.get("kind") == Some("Recv")
            })
            .collect();
        assert_eq!(got.len(), 1, "one completion event for receive {recv}");
        let g = got[0];
        assert_eq!(g.level, Level::TRACE);
        assert_eq!(g.fields.get("protocol"), None, "{g:?}");
        assert_eq!(g.fields.get("len"), Some(&*len.to_string()));
        let (name, span) = g.spans.first().expect("inside a span");
        assert_eq!(
            (*name, span.get("request")),
            ("wait", Some(&*recv.to_string())),
            "{g:?}"
        );
    }
}

#[test]
fn the_in_process_fast_path_makes_no_protocol_decision() {
    // Two endpoints of one fabric, fast path on (the default): the message goes through
    // the facade's lanes, not the EFA protocol, so the operation's event is there and no
    // subprotocol is chosen or reported.
    let fabric = MemFabric::new();
    let mut a = Endpoint::builder().mem(&fabric).build().unwrap();
    let mut b = Endpoint::builder().mem(&fabric).build().unwrap();
    let peer = a.insert_peer(&b.address()).unwrap();
    let records = capture(|| {
        let r = b.trecv(ANY_SOURCE, TagMatch::exact(1), 8).unwrap();
        let s = a.tsend(peer, 1, vec![1u8; 8]).unwrap();
        assert_eq!(b.wait_with(r, &mut [&mut a]).unwrap().data, [1u8; 8]);
        a.wait_with(s, &mut [&mut b]).unwrap();
    });
    assert_eq!(a.stats().facade.protocol(Protocol::Eager), 0);
    assert!(
        records
            .iter()
            .any(|r| r.message() == "tsend" && r.level == Level::TRACE),
        "{records:?}"
    );
    let protocol: Vec<_> = records
        .iter()
        .filter(|r| r.target.starts_with("tagmatch_rdm") || r.fields.get("protocol").is_some())
        .collect();
    assert!(protocol.is_empty(), "{protocol:?}");
}
