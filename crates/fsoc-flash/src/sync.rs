//! The one lock type of the storage crates, so the same code builds with and without std.
//!
//! With the `std` feature it is `std::sync::Mutex` (threads that wait sleep); without it, a
//! spin lock from the `spin` crate (a `no_std` target has no scheduler to sleep on; the
//! sections it guards are short: a page copy, a cache lookup). A lock whose holder panicked is
//! taken anyway: panics are reserved for broken invariants, after which the caller (the FUSE
//! adapter, say) poisons the whole volume; refusing every later lock would only hide that.

#[cfg(feature = "std")]
mod imp {
    pub type MutexGuard<'a, T> = std::sync::MutexGuard<'a, T>;

    /// A mutual-exclusion lock (std flavour).
    #[derive(Default)]
    pub struct Mutex<T>(std::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub const fn new(value: T) -> Mutex<T> {
            Mutex(std::sync::Mutex::new(value))
        }
        /// Waits for the lock.
        pub fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
        }
        /// The value, without locking: `&mut self` proves nobody else holds it.
        pub fn get_mut(&mut self) -> &mut T {
            self.0.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner)
        }
        pub fn into_inner(self) -> T {
            self.0.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }
}

#[cfg(not(feature = "std"))]
mod imp {
    pub type MutexGuard<'a, T> = spin::MutexGuard<'a, T>;

    /// A mutual-exclusion lock (spin flavour, for `no_std`).
    #[derive(Default)]
    pub struct Mutex<T>(spin::Mutex<T>);

    impl<T> Mutex<T> {
        pub const fn new(value: T) -> Mutex<T> {
            Mutex(spin::Mutex::new(value))
        }
        /// Spins until the lock is free.
        pub fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock()
        }
        /// The value, without locking: `&mut self` proves nobody else holds it.
        pub fn get_mut(&mut self) -> &mut T {
            self.0.get_mut()
        }
        pub fn into_inner(self) -> T {
            self.0.into_inner()
        }
    }
}

pub use imp::{Mutex, MutexGuard};

impl<T> core::fmt::Debug for Mutex<T> {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Not locking: formatting must never wait for (or deadlock on) a holder.
        let _ = self;
        formatter.write_str("Mutex { .. }")
    }
}
