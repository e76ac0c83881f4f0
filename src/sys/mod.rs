//! Every call into the C library or the kernel that Rust cannot check, each behind a safe function:
//! the only module where `unsafe` is allowed (the crate denies `unsafe_code` everywhere else). Each
//! function states, at its `unsafe` block, why the call is sound; callers see ordinary Rust types and
//! `io::Result`s. Ground floor: depends on nothing else in the crate.

pub mod codepages;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub mod malloc;
pub mod process;
pub mod socket;
pub mod time;
