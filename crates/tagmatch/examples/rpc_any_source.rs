//! RPC: one server receives requests from ANY_SOURCE and answers each client; the tag
//! carries the method, the reply goes back with the request's id as tag.
//!
//! `cargo run -p tagmatch --example rpc_any_source`

use std::time::Duration;

use tagmatch::{Endpoint, MemFabric, TagMatch, ANY_SOURCE};

const CLIENTS: u64 = 3;
const CALLS: u64 = 5;
/// Request tags: method in the high 32 bits, call id in the low 32.
const METHOD_SQUARE: u64 = 1 << 32;
const METHOD_MASK: u64 = 0xFFFF_FFFF_0000_0000;

fn main() -> Result<(), tagmatch::Error> {
    let fabric = MemFabric::new();
    let mut server = Endpoint::builder().mem(&fabric).build()?;
    let server_addr = server.address();

    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let mut ep = Endpoint::builder().mem(&fabric).build()?;
        clients.push(std::thread::spawn(
            move || -> Result<u64, tagmatch::Error> {
                let srv = ep.insert_peer(&server_addr)?;
                let mut sum = 0;
                for call in 0..CALLS {
                    let x = c * 100 + call;
                    let id = c * CALLS + call;
                    let reply = ep.trecv(srv, id, 8)?;
                    let s = ep.tsend(srv, METHOD_SQUARE | id, x.to_le_bytes().to_vec())?;
                    ep.wait(s)?;
                    let v = ep.wait(reply)?.data_u64().expect("8-byte reply");
                    assert_eq!(v, x * x);
                    sum += v;
                }
                ep.flush(Duration::from_secs(1))?;
                Ok(sum)
            },
        ));
    }

    // Serve CLIENTS * CALLS requests of method SQUARE from anyone, any call id.
    for _ in 0..CLIENTS * CALLS {
        let r = server.trecv(ANY_SOURCE, TagMatch::masked(METHOD_SQUARE, METHOD_MASK), 8)?;
        let req = server.wait(r)?;
        let x = req.data_u64().expect("8-byte argument");
        let who = req.source().expect("receives name their sender");
        let s = server.tsend(who, req.tag & !METHOD_MASK, (x * x).to_le_bytes().to_vec())?;
        server.wait(s)?;
    }
    for (i, c) in clients.into_iter().enumerate() {
        println!(
            "client {i}: sum of squares {}",
            c.join().expect("client thread")?
        );
    }
    println!("server: {}", server.stats());
    Ok(())
}
