//! The side of a fake 9P server in the client's tests: framing a request off the socket and
//! sending an encoded reply. (Apart from `support`, which fsoc-client-c's tests include too.)

/// A fake server's side: the next message on `stream`, whole.
pub fn receive_message(stream: &mut std::os::unix::net::UnixStream) -> Vec<u8> {
    use std::io::Read;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).expect("size");
    let mut message = vec![0u8; u32::from_le_bytes(size) as usize];
    message[..4].copy_from_slice(&size);
    stream.read_exact(&mut message[4..]).expect("body");
    message
}

/// A fake server's side: encodes `reply` under `tag` and sends it.
pub fn send_reply(stream: &mut std::os::unix::net::UnixStream, tag: fsoc_9p::Tag, reply: &fsoc_9p::Reply<'_>) {
    use std::io::Write;
    let mut buffer = vec![0u8; 70_000];
    let length = fsoc_9p::encode(tag, reply, &mut buffer).expect("encode");
    stream.write_all(&buffer[..length]).expect("send");
}
