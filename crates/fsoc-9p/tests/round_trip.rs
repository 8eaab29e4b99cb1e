//! Every 9P2000.L message encodes and decodes back to itself: each variant with seeded values
//! (edges included), and a proptest over variant, seed and the bytes names and data come from.
//! Each check also asserts the framing agrees and that a buffer one byte short is refused
//! without being written.
mod common;

use std::collections::BTreeSet;

use common::{
    sample_reply, sample_request, POOL_BYTES_MAX, REPLY_VARIANT_COUNT, REQUEST_VARIANT_COUNT, SAMPLE_BUFFER_BYTES,
};
use fsoc_9p::constants::message_type;
use fsoc_9p::{decode_header, decode_reply, decode_request, encode, frame_size, EncodeError, Reply, Request, Tag};
use fsoc_media::rng::SeededRng;
use proptest::prelude::*;

/// Encodes, checks the bytes against the framing and header, decodes with `decode` and
/// returns what came back; also checks that a buffer one byte short is refused untouched.
fn check<M: fsoc_9p::Encode>(tag: Tag, message: &M, buffer: &mut [u8]) -> (usize, u8) {
    let length = encode(tag, message, buffer).expect("sample messages fit the buffer");
    assert_eq!(frame_size(&buffer[..length], u32::MAX), Ok(Some(length)), "size field");
    let header = decode_header(&buffer[..length]).expect("header");
    assert_eq!(header.tag, tag);

    let mut short = vec![0xA5u8; length - 1];
    assert_eq!(
        encode(tag, message, &mut short),
        Err(EncodeError::BufferTooSmall { needed_bytes: length, capacity_bytes: length - 1 })
    );
    assert!(short.iter().all(|&byte| byte == 0xA5), "a refused encode wrote into the buffer");
    (length, header.message_type)
}

fn check_request(tag: Tag, request: &Request<'_>) -> u8 {
    let mut buffer = vec![0u8; SAMPLE_BUFFER_BYTES];
    let (length, message_type) = check(tag, request, &mut buffer);
    assert_eq!(message_type, request.message_type());
    assert_eq!(decode_request(&buffer[..length]), Ok((tag, *request)));
    message_type
}

fn check_reply(tag: Tag, reply: &Reply<'_>) -> u8 {
    let mut buffer = vec![0u8; SAMPLE_BUFFER_BYTES];
    let (length, message_type) = check(tag, reply, &mut buffer);
    assert_eq!(message_type, reply.message_type());
    assert_eq!(decode_reply(&buffer[..length]), Ok((tag, *reply)));
    message_type
}

fn pool(rng: &mut SeededRng) -> Vec<u8> {
    let length = rng.below(POOL_BYTES_MAX as u64 + 1) as usize;
    rng.bytes(length)
}

#[test]
fn every_request_type_round_trips() {
    let mut seen = BTreeSet::new();
    for variant in 0..REQUEST_VARIANT_COUNT {
        for seed in 0..64 {
            let mut rng = SeededRng::new(seed * 1000 + variant as u64);
            let pool = pool(&mut rng);
            let request = sample_request(variant, &mut rng, &pool);
            seen.insert(check_request(Tag(rng.next_u64() as u16), &request));
        }
    }
    assert_eq!(seen, message_type::REQUESTS.into_iter().collect::<BTreeSet<_>>(), "request types covered");
}

#[test]
fn every_reply_type_round_trips() {
    let mut seen = BTreeSet::new();
    let mut scratch = vec![0u8; SAMPLE_BUFFER_BYTES];
    for variant in 0..REPLY_VARIANT_COUNT {
        for seed in 0..64 {
            let mut rng = SeededRng::new(seed * 1000 + variant as u64);
            let pool = pool(&mut rng);
            let reply = sample_reply(variant, &mut rng, &pool, &mut scratch);
            seen.insert(check_reply(Tag(rng.next_u64() as u16), &reply));
        }
    }
    assert_eq!(seen, message_type::REPLIES.into_iter().collect::<BTreeSet<_>>(), "reply types covered");
}

#[test]
fn each_reply_code_is_its_request_code_plus_one() {
    assert_eq!(message_type::REPLIES[0], message_type::RLERROR);
    for (request, reply) in message_type::REQUESTS.iter().zip(&message_type::REPLIES[1..]) {
        assert_eq!(*reply, request + 1, "{} / {}", message_type::name(*request), message_type::name(*reply));
        assert_eq!(message_type::name(*request)[1..], message_type::name(*reply)[1..]);
    }
}

#[test]
fn messages_without_names_or_data_have_fixed_lengths() {
    // Lengths from docs/PROTOCOL.md's tables, counted by hand: header 7 plus the body.
    fn length<M: fsoc_9p::Encode>(message: &M) -> usize {
        encode(Tag(1), message, &mut [0u8; 256]).unwrap()
    }
    let fid = fsoc_9p::Fid(1);
    assert_eq!(length(&Request::Clunk { fid }), 7 + 4);
    assert_eq!(length(&Request::Read { fid, offset: 0, count: 1 }), 7 + 16);
    assert_eq!(length(&Request::Setattr { fid, attributes: Default::default() }), 7 + 4 + 56);
    assert_eq!(length(&Reply::Clunk), 7);
    assert_eq!(length(&Reply::Lopen { qid: Default::default(), iounit: 0 }), 7 + 13 + 4);
    assert_eq!(length(&Reply::Getattr { attributes: Default::default() }), 7 + 153);
    assert_eq!(length(&Reply::Statfs { stats: Default::default() }), 7 + 60);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn generated_requests_round_trip(
        variant in 0..REQUEST_VARIANT_COUNT,
        seed in any::<u64>(),
        tag in any::<u16>(),
        pool in proptest::collection::vec(any::<u8>(), 0..POOL_BYTES_MAX),
    ) {
        let mut rng = SeededRng::new(seed);
        let request = sample_request(variant, &mut rng, &pool);
        check_request(Tag(tag), &request);
    }

    #[test]
    fn generated_replies_round_trip(
        variant in 0..REPLY_VARIANT_COUNT,
        seed in any::<u64>(),
        tag in any::<u16>(),
        pool in proptest::collection::vec(any::<u8>(), 0..POOL_BYTES_MAX),
    ) {
        let mut rng = SeededRng::new(seed);
        let mut scratch = vec![0u8; SAMPLE_BUFFER_BYTES];
        let reply = sample_reply(variant, &mut rng, &pool, &mut scratch);
        check_reply(Tag(tag), &reply);
    }
}
