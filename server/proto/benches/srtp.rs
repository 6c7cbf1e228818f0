//! The cost of SRTP per packet and viewer: an RTSPS viewer on `RTP/SAVP` has every packet
//! of its stream encrypted and authenticated for it alone (the payload can no longer be
//! shared between viewers), so this sets the CPU an SRTP viewer adds to a plain one.
//! Figures: docs/BENCHMARKS.md "SRTP".

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use vigil_proto::srtp::{Context, MasterKey, Profile, KEY_AND_SALT_LEN};

fn header(seq: u16) -> [u8; 12] {
    let mut h = [0u8; 12];
    h[0] = 0x80;
    h[1] = 96;
    h[2..4].copy_from_slice(&seq.to_be_bytes());
    h[8..12].copy_from_slice(&0x1234_5678u32.to_be_bytes());
    h
}

fn protect(c: &mut Criterion) {
    let key = MasterKey::from_bytes(&[7; KEY_AND_SALT_LEN]);
    let mut group = c.benchmark_group("srtp_protect");
    // A full FU-A fragment at the default MTU (1400 - 60 - 12) and a small audio packet.
    for size in [1328usize, 160] {
        let payload = vec![0xa5u8; size];
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &payload, |b, payload| {
            let mut ctx = Context::new(&key, Profile::AesCm128HmacSha1_80);
            let mut seq = 0u16;
            b.iter(|| {
                seq = seq.wrapping_add(1);
                black_box(ctx.protect_parts(&header(seq), black_box(payload)))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, protect);
criterion_main!(benches);
