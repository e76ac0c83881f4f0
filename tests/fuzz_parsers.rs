//! Fuzzing of every decoder and parser that reads outside input (the short run of the test command; the
//! long run is `scripts/fuzz.sh`). Targets and generators are in `tests/common/fuzz/`.
//!
//! `FUZZ_CASES` (default 2000) and `FUZZ_SEED` (default a fixed seed, so the test command is
//! reproducible) override the run.

#[path = "common/fuzz/mod.rs"]
mod fuzz;

use fuzz::{Corpus, TARGETS, run_target};

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
        println!(
            "{} (slowest case {} took {:?})",
            r.line(),
            r.slowest.0,
            r.slowest.1
        );
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
    assert!(!concerns_other_links(REGRESSIONS[1].1, Some(1)));
    assert!(concerns_other_links(REGRESSIONS[1].1, Some(2)));
}
