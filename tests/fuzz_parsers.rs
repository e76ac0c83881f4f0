//! Fuzzing of every decoder and parser that reads outside input (the short run of the test command; the
//! long run is `scripts/fuzz.sh`). Targets and generators are in `tests/common/fuzz/`.
//!
//! `FUZZ_CASES` (default 2000) and `FUZZ_SEED` (default a fixed seed, so the test command is
//! reproducible) override the run.

#[path = "common/fuzz/mod.rs"]
mod fuzz;

use fuzz::{Corpus, TARGETS, run_target};

// Counts each case's memory (per thread), for the targets' memory bounds.
#[global_allocator]
static ALLOC: fuzz::alloc::Counting = fuzz::alloc::Counting;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn every_target_survives_mutated_and_random_input() {
    let corpus = Corpus::load();
    let cases = env_u64("FUZZ_CASES", 2000);
    let seed = env_u64("FUZZ_SEED", 13);
    let mut failed = Vec::new();
    for t in TARGETS {
        let r = run_target(t, &corpus, seed, cases);
        println!("{} ({})", r.line(), r.extremes());
        for (case, msg) in r.failures.iter().take(3) {
            failed.push(format!("{} case {case} (seed {seed}): {msg}", r.target));
        }
    }
    assert!(failed.is_empty(), "fuzz failures:\n{}", failed.join("\n"));
}

#[test]
fn the_samples_themselves_decode() {
    // The generators start from these: they must be valid, or the fuzzing explores only error paths.
    let corpus = Corpus::load();
    assert!(corpus.services.len() >= 3 && corpus.slices.len() >= 3);
    for t in TARGETS {
        let mut rng = fuzz::case_rng(0, t.name, 0);
        let input = (t.generate)(&mut rng, &corpus);
        fuzz::run_case(t, &input).unwrap_or_else(|e| panic!("{}: {e}", t.name));
    }
}

#[test]
fn generated_objects_mostly_still_decode() {
    // Mutated Services/EndpointSlices that no longer decode exercise only serde; most must still reach
    // the conversion (nulls and unknown fields in places the schema allows them).
    let corpus = Corpus::load();
    for (name, kind) in [
        ("service_convert", "Service"),
        ("endpointslice_convert", "EndpointSlice"),
    ] {
        let t = TARGETS.iter().find(|t| t.name == name).expect("target");
        let decoded = (0..1000)
            .filter(|&case| {
                let input = fuzz::input_of(t, &corpus, 7, case);
                match kind {
                    "Service" => {
                        serde_json::from_slice::<k8s_openapi::api::core::v1::Service>(&input)
                            .is_ok()
                    }
                    _ => serde_json::from_slice::<k8s_openapi::api::discovery::v1::EndpointSlice>(
                        &input,
                    )
                    .is_ok(),
                }
            })
            .count();
        println!("{name}: {decoded} of 1000 generated objects decode");
        assert!(
            decoded >= 200,
            "{name}: only {decoded} of 1000 generated objects decode"
        );
    }
}

#[test]
fn mutated_protobuf_objects_mostly_still_read() {
    // Wire-level mutations that no field kube-proxy reads notices must leave the object readable,
    // or the protobuf targets would explore only the error paths.
    use kube_proxy_rs::cluster::decode::Decoded;
    let corpus = Corpus::load();
    for name in ["service_protobuf", "endpointslice_protobuf"] {
        let t = TARGETS.iter().find(|t| t.name == name).expect("target");
        let read = (0..1000)
            .filter(|&case| {
                let input = fuzz::input_of(t, &corpus, 7, case);
                match name {
                    "service_protobuf" => matches!(
                        Decoded::<k8s_openapi::api::core::v1::Service>::from_protobuf(&input),
                        Decoded::Object(_)
                    ),
                    _ => matches!(
                        Decoded::<k8s_openapi::api::discovery::v1::EndpointSlice>::from_protobuf(
                            &input
                        ),
                        Decoded::Object(_)
                    ),
                }
            })
            .count();
        println!("{name}: {read} of 1000 generated objects read");
        assert!(
            read >= 150,
            "{name}: only {read} of 1000 generated objects read"
        );
    }
}

/// Inputs that crashed a target once, with the target they crashed (each fixed in the parser).
const REGRESSIONS: &[(&str, &[u8])] = &[
    // A NLMSG_DONE code of i32::MIN was negated: an overflow panic in debug builds (found by
    // `FUZZ_CASES=20000` in the test profile, seed 13, ipvs_genl case 3726).
    (
        "ipvs_genl",
        b"$\x00\x00\x00\"\x00\x02\x00\t\x00\x00\x00\x00\x00\x00\x00\x0e\x01\x00\x00\x08\x00\x01\x00\x03\x02\x01\x00\x08\x00\x02\x00\x00\x10\x00\x00\x14\x00\x00\x00\x03\x00\x00\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x00\x80\xc2\xfc",
    ),
    // concerns_other_links sliced past the end when the last message's length was not 4-aligned
    // and its padding was missing (found by the bench, seed 20261125, case 94243).
    (
        "rtnetlink",
        b"2\x00\x00\x00\x10\x00\x02\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x07\x00\x03\x00lo\x00\x00\x08\x00\x04\x00\xdc\x05\x00\x004\x00",
    ),
    (
        "rtnetlink",
        b")\x00\x00\x00\x14\x00\x02\x00\x02\x00\x00\x00\x00\x00\x00\x00\x02 \x00\x00\x01\x00\x00\x00\x08\x00\x01\x00\x00\x00\x00\x00\x08\x00\x02\x00\x7f\x00\x00\x80(",
    ),
];

#[test]
fn inputs_that_once_crashed_are_handled() {
    for (name, input) in REGRESSIONS {
        let t = TARGETS.iter().find(|t| t.name == *name).expect("target");
        fuzz::run_case(t, input).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // The notification reader itself: an unaligned last message is still read: it names link 1 only.
    use kube_proxy_rs::kernel::link::changes::concerns_other_links;
    assert!(!concerns_other_links(REGRESSIONS[2].1, Some(1)));
    assert!(concerns_other_links(REGRESSIONS[2].1, Some(2)));
}

#[test]
fn the_memory_of_each_case_is_counted() {
    assert!(
        fuzz::alloc::installed(),
        "the counting allocator is not installed"
    );
}

#[test]
fn a_watch_line_without_end_costs_at_most_the_cap() {
    // 24 MiB without a newline, in 64 KiB pieces: refused past 16 MiB, and never more held than the
    // cap and the buffer's growth (the framing used to buffer all of it, searching it all again per
    // piece).
    use kube_proxy_rs::cluster::listwatch::frames::{Framer, Framing, MAX_FRAME};
    let base = fuzz::alloc::current();
    fuzz::alloc::reset_peak();
    let mut framer = Framer::new(Framing::Lines);
    let piece = vec![b'x'; 64 << 10];
    let mut refused_at = None;
    for i in 0..384 {
        framer.push(&piece);
        if let Some(frame) = framer.next_frame() {
            assert!(frame.is_err());
            refused_at = Some((i + 1) * piece.len());
            break;
        }
    }
    let peak = fuzz::alloc::peak_since_reset(base);
    assert_eq!(refused_at, Some(MAX_FRAME + piece.len()));
    assert!(peak <= 2 * MAX_FRAME + (1 << 20), "{peak} bytes");
    assert!(framer.examined() <= (MAX_FRAME + piece.len()) as u64);
}

#[test]
fn a_gzip_bomb_costs_at_most_one_step() {
    // 64 MiB of zeros in about 64 KiB, decoded step by step with the output dropped (as a capped
    // reader does): memory stays at the decoder's state and one step's output.
    use bytes::Bytes;
    use kube_proxy_rs::cluster::gzip::{Gunzip, IN_STEP};
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(&vec![0u8; 64 << 20]).unwrap();
    let bomb = e.finish().unwrap();
    let base = fuzz::alloc::current();
    fuzz::alloc::reset_peak();
    let mut g = Gunzip::default();
    let mut total = 0;
    for chunk in bomb.chunks(16 << 10) {
        g.feed(Bytes::copy_from_slice(chunk));
        while let Some(out) = g.step().unwrap() {
            total += out.len();
        }
    }
    total += g.finish().unwrap().map_or(0, |out| out.len());
    let peak = fuzz::alloc::peak_since_reset(base);
    assert_eq!(total, 64 << 20);
    assert!(peak <= 2 * 1100 * IN_STEP + (1 << 20), "{peak} bytes");
}
