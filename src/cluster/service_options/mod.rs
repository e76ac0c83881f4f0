//! Per-Service options: what a Service asks of kube-proxy-rs through annotations, parsed once when the
//! Service is converted (the tracker boundary) into one typed value its ports share.
//!
//! Each option is one parser over the annotation keys it reads ([`OPTIONS`]). A value that is refused,
//! or an annotation this proxy does not support, never rejects the Service: it becomes an
//! [`AnnotationError`] in [`ServiceOptions::problems`]. The planner copies the options into the Service's
//! decision record, and the daemon reports every problem from there (a warning, a Warning Event on the
//! Service and `kubeproxy_rs_service_annotation_errors_total{annotation}`). Adding an annotation is one
//! parser here and one use in the planner.

mod kube_router;
mod scheduler;
mod types;

pub use kube_router::{
    KUBE_ROUTER_DSR, KUBE_ROUTER_HAIRPIN, KUBE_ROUTER_HAIRPIN_EXTERNAL_IPS, KUBE_ROUTER_LOCAL,
    KUBE_ROUTER_SKIP_LB_IPS,
};
pub use scheduler::{
    KUBE_ROUTER_SCHEDULER, KUBE_ROUTER_SCHEDULER_FLAGS, SCHEDULER, SCHEDULER_FLAGS,
    scheduler_request,
};
pub use types::{
    AnnotationError, Annotations, OptionParser, ProblemKind, SchedulerRequest, ServiceOptions,
};

use std::collections::BTreeMap;
use std::sync::Arc;

/// Every option, in the order they are parsed. Adding an option is one line here: the decoders'
/// list of annotations to keep ([`SERVICE_ANNOTATIONS`]) is derived from it.
pub const OPTIONS: &[OptionParser] = &[
    scheduler::OPTION,
    kube_router::LOCAL,
    kube_router::UNSUPPORTED,
];

/// Every Service annotation kube-proxy-rs reads (the decoders keep these and drop the rest): the keys
/// of [`OPTIONS`], in order, computed at compile time.
pub const SERVICE_ANNOTATIONS: &[&str] = &ANNOTATION_KEYS;

const ANNOTATION_KEYS: [&str; key_count(OPTIONS)] = keys_of(OPTIONS);

/// How many keys `options` read in all.
const fn key_count(options: &[OptionParser]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < options.len() {
        n += options[i].keys.len();
        i += 1;
    }
    n
}

/// The keys `options` read, in order (`N` is [`key_count`] of them).
const fn keys_of<const N: usize>(options: &[OptionParser]) -> [&'static str; N] {
    let mut out = [""; N];
    let (mut i, mut k) = (0, 0);
    while i < options.len() {
        let mut j = 0;
        while j < options[i].keys.len() {
            out[k] = options[i].keys[j];
            k += 1;
            j += 1;
        }
        i += 1;
    }
    out
}

impl ServiceOptions {
    /// The options `annotations` ask for; `None` when they ask for nothing (no annotation of ours).
    pub fn from_annotations(
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Option<Arc<ServiceOptions>> {
        let map = annotations?;
        if !SERVICE_ANNOTATIONS.iter().any(|k| map.contains_key(*k)) {
            return None;
        }
        let mut options = ServiceOptions::default();
        for option in OPTIONS {
            (option.parse)(Annotations(map), &mut options);
        }
        (options != ServiceOptions::default()).then(|| Arc::new(options))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_decoder_keeps_exactly_the_keys_the_parsers_read_once_each() {
        let read: Vec<&str> = OPTIONS
            .iter()
            .flat_map(|o| o.keys.iter().copied())
            .collect();
        assert_eq!(SERVICE_ANNOTATIONS, read.as_slice());
        assert!(SERVICE_ANNOTATIONS.contains(&SCHEDULER));
        assert!(SERVICE_ANNOTATIONS.contains(&KUBE_ROUTER_HAIRPIN_EXTERNAL_IPS));
        let kept: BTreeSet<&str> = SERVICE_ANNOTATIONS.iter().copied().collect();
        assert_eq!(
            kept.len(),
            SERVICE_ANNOTATIONS.len(),
            "a key is read by two options"
        );
    }

    #[test]
    fn no_annotation_of_ours_is_no_options() {
        assert_eq!(ServiceOptions::from_annotations(None), None);
        let map = BTreeMap::from([("other".to_string(), "x".to_string())]);
        assert_eq!(ServiceOptions::from_annotations(Some(&map)), None);
        // Blank values count as unset.
        let map = BTreeMap::from([(SCHEDULER.to_string(), " ".to_string())]);
        assert_eq!(ServiceOptions::from_annotations(Some(&map)), None);
    }

    #[test]
    fn long_values_are_shortened_at_a_character_boundary() {
        let long = "é".repeat(200);
        let e = AnnotationError::new(SCHEDULER, &long, "bad".into(), ProblemKind::Invalid);
        assert!(
            e.value.len() <= crate::truncate::MAX_QUOTED_VALUE,
            "{}",
            e.value.len()
        );
        assert!(e.value.ends_with("…(400 bytes)"), "{}", e.value);
        let short = AnnotationError::new(SCHEDULER, "rr", "bad".into(), ProblemKind::Invalid);
        assert_eq!(short.value, "rr");
    }
}
