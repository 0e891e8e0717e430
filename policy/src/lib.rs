//! The collection policy of waitshim: which waits deserve the expensive data (call chains, holder
//! stacks, per-event records). Read by the shim from `WAITSHIM_POLICY` and by
//! `waitshim-analyze policy check`; one parser so that both agree on what a file means.

pub mod signal;
