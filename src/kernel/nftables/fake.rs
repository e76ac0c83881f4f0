//! In-memory nf_tables tables with the kernel's handles; cloning shares the state.

use super::{NfTables, NftTable};
use crate::kernel::{KernelError, KernelResult};
use crate::net::IpFamily;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Debug, Clone)]
enum Failure {
    /// EPERM with this text.
    Errno(String),
    /// A kernel without nf_tables.
    Unsupported,
}

#[derive(Debug, Default)]
struct State {
    tables: Vec<NftTable>,
    next_handle: u64,
    /// Every call fails with this error when set.
    fail: Option<Failure>,
    deletes: usize,
}

/// In-memory [`NfTables`].
#[derive(Debug, Clone, Default)]
pub struct FakeNfTables {
    inner: Arc<Mutex<State>>,
}

impl FakeNfTables {
    /// No table exists.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a table (the kernel gives it the next handle); returns the handle.
    pub fn add(&self, family: IpFamily, name: &str, comment: Option<&str>) -> u64 {
        let mut st = self.lock();
        st.next_handle += 1;
        let handle = st.next_handle;
        st.tables.push(NftTable {
            family,
            name: name.to_string(),
            handle,
            comment: comment.map(String::from),
        });
        handle
    }

    /// The tables as (family, name), in creation order.
    pub fn names(&self) -> Vec<(IpFamily, String)> {
        self.lock()
            .tables
            .iter()
            .map(|t| (t.family, t.name.clone()))
            .collect()
    }

    /// Makes every call fail with EPERM and this text (Some) or work again (None).
    pub fn set_fail(&self, error: Option<&str>) {
        self.lock().fail = error.map(|e| Failure::Errno(e.to_string()));
    }

    /// Makes every call answer as a kernel without nf_tables.
    pub fn set_unsupported(&self) {
        self.lock().fail = Some(Failure::Unsupported);
    }

    /// Tables deleted so far.
    pub fn deletes(&self) -> usize {
        self.lock().deletes
    }

    fn check(st: &State, op: &str) -> KernelResult<()> {
        match &st.fail {
            Some(Failure::Errno(e)) => Err(KernelError::Errno {
                op: op.to_string(),
                errno: libc::EPERM,
                message: e.clone(),
            }),
            Some(Failure::Unsupported) => Err(KernelError::Unsupported(format!(
                "{op}: Protocol not supported"
            ))),
            None => Ok(()),
        }
    }
}

impl NfTables for FakeNfTables {
    fn table(&mut self, family: IpFamily, name: &str) -> KernelResult<Option<NftTable>> {
        let st = self.lock();
        Self::check(&st, "get table")?;
        Ok(st
            .tables
            .iter()
            .find(|t| t.family == family && t.name == name)
            .cloned())
    }

    fn delete_table(&mut self, family: IpFamily, handle: u64) -> KernelResult<bool> {
        let mut st = self.lock();
        Self::check(&st, "delete table")?;
        let before = st.tables.len();
        st.tables
            .retain(|t| !(t.family == family && t.handle == handle));
        let deleted = st.tables.len() < before;
        st.deletes += usize::from(deleted);
        Ok(deleted)
    }
}
