//! One-sided write + read: the target registers a region and sends its key in a message;
//! the initiator writes into it and reads it back, without the target posting anything.
//!
//! `cargo run -p tagmatch --example rma_write_read`

use tagmatch::{Endpoint, MemFabric, RemoteKey, ANY_SOURCE};

fn main() -> Result<(), tagmatch::Error> {
    let fabric = MemFabric::new();
    let mut target = Endpoint::builder().mem(&fabric).build()?;
    let mut initiator = Endpoint::builder().mem(&fabric).build()?;
    let t = initiator.insert_peer(&target.address())?;
    let i = target.insert_peer(&initiator.address())?;

    // Target: register 1 MiB and tell the initiator where it is.
    let region = target.register(vec![0u8; 1 << 20])?;
    let key_msg = initiator.trecv(ANY_SOURCE, 0xC0DE, 24)?;
    let s = target.tsend(i, 0xC0DE, region.remote_key().to_bytes().to_vec())?;
    target.wait_with(s, &mut [&mut initiator])?;
    let c = initiator.wait_with(key_msg, &mut [&mut target])?;
    let key = RemoteKey::from_bytes(&c.data).expect("24-byte key");

    // Initiator: write 256 KiB at offset 4096, read it back.
    let data: Vec<u8> = (0..256 * 1024).map(|x| (x % 253) as u8).collect();
    let w = initiator.write(t, data.clone(), key.at(4096))?;
    let wc = initiator.wait_with(w, &mut [&mut target])?;
    let r = initiator.read(t, data.len(), key.at(4096))?;
    let rc = initiator.wait_with(r, &mut [&mut target])?;
    assert_eq!(rc.data, data);
    assert_eq!(&target.region(&region)?[4096..4096 + data.len()], &data[..]);
    println!(
        "wrote {} bytes ({:?}), read them back ({:?})",
        data.len(),
        wc.protocol,
        rc.protocol
    );
    Ok(())
}
