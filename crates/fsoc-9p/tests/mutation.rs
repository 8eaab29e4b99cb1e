//! Decoding is total: valid encodings of every message type, mutated by a seeded generator
//! (bytes flipped, cut short, extended, the size field rewritten to match, or replaced by random
//! bytes behind a plausible header), go through both decoders, the framing and the header
//! reader 1.2 × 10^6 times without a panic. A message cut short or extended without fixing
//! its size field must be an error; and whatever decodes must re-encode to exactly the bytes it
//! came from (decoding accepts only the canonical form). A failure prints the seed and
//! iteration; `FSOC_SEED=0x...` replays a run.
mod common;

use common::{
    sample_reply, sample_request, POOL_BYTES_MAX, REPLY_VARIANT_COUNT, REQUEST_VARIANT_COUNT, SAMPLE_BUFFER_BYTES,
};
use fsoc_9p::constants::message_type;
use fsoc_9p::{decode_header, decode_reply, decode_request, encode, frame_size, Tag};
use fsoc_media::rng::{hash64, SeededRng};

const INPUT_COUNT: u64 = 600_000;

/// Prints how to replay the iteration that was running when the test panicked.
struct ReplayOnPanic {
    seed: u64,
    iteration: u64,
}

impl Drop for ReplayOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "replay: FSOC_SEED={:#x} cargo test --release -p fsoc-9p --test mutation (iteration {})",
                self.seed, self.iteration
            );
        }
    }
}

/// What was done to a valid encoding, and so what decoding must say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mutation {
    /// 1 to 4 bytes overwritten anywhere, the header included: anything may happen.
    Overwrite,
    /// A strict prefix: must not decode.
    CutShort,
    /// Bytes appended, size field unchanged: must not decode.
    Extend,
    /// A strict prefix or an extension whose size field is rewritten to match: a 9P message's
    /// fields delimit themselves, so this must not decode either.
    ResizeConsistently,
    /// Random body bytes behind a header of a known type and a matching size: anything.
    RandomBody,
}

fn valid_encoding(rng: &mut SeededRng, pool: &[u8], scratch: &mut [u8], out: &mut Vec<u8>) {
    out.resize(SAMPLE_BUFFER_BYTES, 0);
    let tag = Tag(rng.next_u64() as u16);
    let length = if rng.below(2) == 0 {
        let request = sample_request(rng.below(REQUEST_VARIANT_COUNT as u64) as usize, rng, pool);
        encode(tag, &request, out).expect("sample fits")
    } else {
        let reply = sample_reply(rng.below(REPLY_VARIANT_COUNT as u64) as usize, rng, pool, scratch);
        encode(tag, &reply, out).expect("sample fits")
    };
    out.truncate(length);
}

fn set_size_field(bytes: &mut [u8]) {
    let size = bytes.len() as u32;
    bytes[..4].copy_from_slice(&size.to_le_bytes());
}

fn mutate(rng: &mut SeededRng, bytes: &mut Vec<u8>) -> Mutation {
    let known: Vec<u8> = message_type::REQUESTS.iter().chain(&message_type::REPLIES).copied().collect();
    match rng.below(5) {
        0 => {
            for _ in 0..rng.range(1, 4) {
                let index = rng.below(bytes.len() as u64) as usize;
                bytes[index] = rng.next_u64() as u8;
            }
            Mutation::Overwrite
        }
        1 => {
            bytes.truncate(rng.below(bytes.len() as u64) as usize);
            Mutation::CutShort
        }
        2 => {
            let extra_length = rng.range(1, 64) as usize;
            let extra = rng.bytes(extra_length);
            bytes.extend_from_slice(&extra);
            Mutation::Extend
        }
        3 => {
            if bytes.len() > 7 && rng.below(2) == 0 {
                bytes.truncate(rng.range(7, bytes.len() as u64 - 1) as usize);
            } else {
                let extra_length = rng.range(1, 64) as usize;
                let extra = rng.bytes(extra_length);
                bytes.extend_from_slice(&extra);
            }
            set_size_field(bytes);
            Mutation::ResizeConsistently
        }
        _ => {
            let body_length = rng.below(200) as usize;
            let body = rng.bytes(body_length);
            bytes.truncate(7);
            bytes[4] = *rng.pick(&known).expect("known types");
            bytes.extend_from_slice(&body);
            set_size_field(bytes);
            Mutation::RandomBody
        }
    }
}

#[test]
fn mutated_messages_never_panic_and_what_decodes_is_canonical() {
    let seed = std::env::var("FSOC_SEED")
        .ok()
        .map(|text| u64::from_str_radix(text.trim_start_matches("0x"), 16).expect("FSOC_SEED is hex"))
        .unwrap_or(0x9e37_79b9_7f4a_7c15);
    let mut pool_rng = SeededRng::new(seed);
    let pools: Vec<Vec<u8>> = (0..16)
        .map(|_| {
            let length = pool_rng.below(POOL_BYTES_MAX as u64) as usize;
            pool_rng.bytes(length)
        })
        .collect();
    let mut scratch = vec![0u8; SAMPLE_BUFFER_BYTES];
    let mut bytes = Vec::with_capacity(SAMPLE_BUFFER_BYTES);
    let mut reencoded = vec![0u8; SAMPLE_BUFFER_BYTES + 256];
    let mut decode_count = 0u64;
    let mut decoded_count = 0u64;

    for iteration in 0..INPUT_COUNT {
        let _replay = ReplayOnPanic { seed, iteration };
        let mut rng = SeededRng::new(hash64(seed, iteration, 0, 0));
        let pool = &pools[rng.below(pools.len() as u64) as usize];
        valid_encoding(&mut rng, pool, &mut scratch, &mut bytes);
        let mutation = mutate(&mut rng, &mut bytes);

        let _ = frame_size(&bytes, 1 << 20);
        let _ = decode_header(&bytes);
        let as_request = decode_request(&bytes);
        let as_reply = decode_reply(&bytes);
        decode_count += 2;

        if matches!(mutation, Mutation::CutShort | Mutation::Extend | Mutation::ResizeConsistently) {
            assert!(as_request.is_err(), "{mutation:?} decoded as a request: {as_request:?}");
            assert!(as_reply.is_err(), "{mutation:?} decoded as a reply: {as_reply:?}");
        }
        assert!(as_request.is_err() || as_reply.is_err(), "one message decoded both ways");
        if let Ok((tag, request)) = as_request {
            let length = encode(tag, &request, &mut reencoded).expect("a decoded request re-encodes");
            assert_eq!(reencoded[..length], bytes[..], "request not canonical: {request:?}");
            decoded_count += 1;
        }
        if let Ok((tag, reply)) = as_reply {
            let length = encode(tag, &reply, &mut reencoded).expect("a decoded reply re-encodes");
            assert_eq!(reencoded[..length], bytes[..], "reply not canonical: {reply:?}");
            decoded_count += 1;
        }
    }
    assert!(decode_count >= 1_000_000, "{decode_count} decodes");
    // Overwrites of data bytes keep many messages valid: the canonical check must have run.
    assert!(decoded_count > INPUT_COUNT / 20, "only {decoded_count} mutated inputs decoded");
    eprintln!("{decode_count} decodes of {INPUT_COUNT} mutated inputs, {decoded_count} decoded (seed {seed:#x})");
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = SeededRng::new(0x5eed);
    let mut decode_count = 0u64;
    for _ in 0..200_000 {
        let length = rng.below(64) as usize;
        let mut bytes = rng.bytes(length);
        if bytes.len() >= 4 && rng.below(2) == 0 {
            set_size_field(&mut bytes);
        }
        let _ = frame_size(&bytes, 8192);
        let _ = decode_header(&bytes);
        let _ = decode_request(&bytes);
        let _ = decode_reply(&bytes);
        decode_count += 2;
    }
    assert_eq!(decode_count, 400_000);
}
