//! Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`) of the watched kinds.
//!
//! The generated message types come from the `k8s-pb` crate (kube-rs project); kube's own client
//! speaks JSON only, so the list-watch loop ([`crate::cluster::listwatch`]) asks for protobuf and
//! hands each object's bytes here. Decoding keeps the lenient decoder's guarantees: only the fields
//! kube-proxy reads are materialised (the rest is skipped on the wire, [`prune`]), and an object that
//! cannot be read becomes [`Decoded::Unreadable`](crate::cluster::decode::Decoded) instead of failing
//! its list or watch.

pub mod envelope;
pub mod kinds;
mod object;
pub mod prune;
pub mod wire;

pub use envelope::{MAGIC, MEDIA_TYPE};
pub use kinds::Protobuf;
