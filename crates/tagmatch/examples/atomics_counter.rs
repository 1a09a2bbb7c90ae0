//! A shared counter: a registered 8-byte region on one endpoint, incremented by several
//! client threads with fetch-and-add; a compare-and-swap resets it at the end.
//!
//! `cargo run -p tagmatch --example atomics_counter`

use std::sync::mpsc;
use std::time::Duration;

use tagmatch::{Endpoint, MemFabric};

const CLIENTS: usize = 4;
const ADDS: u64 = 250;

fn main() -> Result<(), tagmatch::Error> {
    let fabric = MemFabric::new();
    let mut owner = Endpoint::builder().mem(&fabric).build()?;
    let counter = owner.register(vec![0u8; 8])?;
    let (key, addr) = (counter.remote_key(), owner.address());
    let (done_tx, done_rx) = mpsc::channel();

    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut ep = Endpoint::builder().mem(&fabric).build()?;
        let done = done_tx.clone();
        clients.push(std::thread::spawn(
            move || -> Result<(), tagmatch::Error> {
                let p = ep.insert_peer(&addr)?;
                for _ in 0..ADDS {
                    let r = ep.fetch_add_u64(p, key.at(0), 1)?;
                    ep.wait(r)?;
                }
                ep.flush(Duration::from_secs(1))?;
                done.send(()).expect("main thread waits");
                Ok(())
            },
        ));
    }
    drop(done_tx);
    // The owner serves the atomics by progressing; it posts nothing.
    let mut finished = 0;
    while finished < CLIENTS {
        owner.progress()?;
        while done_rx.try_recv().is_ok() {
            finished += 1;
        }
    }
    for c in clients {
        c.join().expect("client thread")?;
    }
    let total = u64::from_le_bytes(owner.region(&counter)?.try_into().expect("8 bytes"));
    assert_eq!(total, CLIENTS as u64 * ADDS);

    // Reset it with a compare-and-swap from a fresh endpoint.
    let mut resetter = Endpoint::builder().mem(&fabric).build()?;
    let p = resetter.insert_peer(&owner.address())?;
    let cas = resetter.compare_swap_u64(p, key.at(0), total, 0)?;
    let old = resetter.wait_with(cas, &mut [&mut owner])?.data_u64();
    println!(
        "counter reached {total} (CAS saw {old:?}), now {:?}",
        owner.region(&counter)?
    );
    Ok(())
}
