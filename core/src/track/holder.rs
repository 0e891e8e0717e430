//! Who holds an object now, read from the object's own memory (glibc's owner and writer
//! fields) or from the shim's state for kinds glibc does not record a holder for.

use std::sync::atomic::Ordering;

use waitshim_format::ObjectKind;

use super::objects::ObjEntry;

impl ObjEntry {
    /// The thread holding the object now, for kinds that have one: a mutex's owner, an rwlock's
    /// writer, a spinlock's last acquirer while it is locked, the thread a join waits for. 0
    /// when free or when the kind has no owner.
    ///
    /// # Safety
    /// The object is live for the read: one the calling thread is using now (waiting on it,
    /// releasing it). An object that may have gone away is read by [`ObjEntry::holder_checked`].
    pub unsafe fn holder(&self) -> u32 {
        // SAFETY: as the caller promises.
        unsafe { self.holder_read(false) }
    }

    /// As [`ObjEntry::holder`], for an object that may have gone away: its memory is read through
    /// the kernel.
    pub fn holder_checked(&self) -> u32 {
        // SAFETY: `checked` reads nothing directly.
        unsafe { self.holder_read(true) }
    }

    /// # Safety
    /// Unless `checked`, the object is live (see [`ObjEntry::holder`]).
    unsafe fn holder_read(&self, checked: bool) -> u32 {
        use crate::layout;
        // Unchecked reads rely on the caller's promise; a registered entry's address is its
        // object's.
        match self.kind {
            ObjectKind::Mutex if checked => layout::mutex::owner_checked(self.addr()),
            // SAFETY: not `checked`, so the caller promises this mutex is live.
            ObjectKind::Mutex => unsafe { layout::mutex::owner(self.addr()) },
            // SAFETY: `writer` reads through the kernel when `checked`; otherwise the caller
            // promises this rwlock is live.
            ObjectKind::RwLock => unsafe { layout::rwlock::writer(self.addr(), checked) },
            ObjectKind::Thread => self.owner.last.load(Ordering::Relaxed),
            ObjectKind::Spin => {
                let word = if checked {
                    layout::read_checked(self.addr())
                } else {
                    // SAFETY: not `checked`, so the caller promises this spinlock is live.
                    unsafe { layout::spin::word(self.addr()) }
                };
                // Every acquisition of a spinlock goes through the shim and sets `last`.
                if layout::spin::is_free(word) {
                    0
                } else {
                    self.owner.last.load(Ordering::Relaxed)
                }
            }
            _ => 0,
        }
    }
}
