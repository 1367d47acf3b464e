//! Curator's provider strategies: which instance a
//! [`ServiceProvider`](crate::ServiceProvider) hands out.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::instance::ServiceInstance;

/// Picks one of the instances available (Curator's `ProviderStrategy`):
/// the index of the one to use, `None` if there are none.
pub trait ProviderStrategy<T>: Send + Sync {
    /// The index into `instances` of the instance to use.
    fn choose(&self, instances: &[ServiceInstance<T>]) -> Option<usize>;
}

/// Each instance in turn (Curator's `RoundRobinStrategy`).
#[derive(Debug, Default)]
pub struct RoundRobinStrategy {
    next: AtomicUsize,
}

impl RoundRobinStrategy {
    /// Starts with the first instance.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<T> ProviderStrategy<T> for RoundRobinStrategy {
    fn choose(&self, instances: &[ServiceInstance<T>]) -> Option<usize> {
        if instances.is_empty() {
            return None;
        }
        Some(self.next.fetch_add(1, Ordering::Relaxed) % instances.len())
    }
}

/// A random instance each time (Curator's `RandomStrategy`).
#[derive(Debug)]
pub struct RandomStrategy {
    state: AtomicU64,
}

impl Default for RandomStrategy {
    fn default() -> Self {
        // A seed from the standard library's per-process random keys.
        let seed = RandomState::new().hash_one(std::time::Instant::now());
        RandomStrategy {
            state: AtomicU64::new(seed | 1),
        }
    }
}

impl RandomStrategy {
    /// A randomly seeded strategy.
    pub fn new() -> Self {
        Self::default()
    }

    /// splitmix64 over an atomic counter: evenly spread, lock-free.
    fn next(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl<T> ProviderStrategy<T> for RandomStrategy {
    fn choose(&self, instances: &[ServiceInstance<T>]) -> Option<usize> {
        if instances.is_empty() {
            return None;
        }
        let n = instances.len() as u64;
        // `n` is at most usize::MAX, so the remainder fits.
        Some(usize::try_from(self.next() % n).unwrap_or(0))
    }
}

/// The same instance for as long as it is available, then another one
/// picked by the master strategy (Curator's `StickyStrategy`).
///
/// The instance is remembered by name and id, so it stays chosen through
/// an update of its contents (Curator compares whole instances and picks
/// again then).
#[derive(Debug)]
pub struct StickyStrategy<S> {
    master: S,
    ours: Mutex<Option<(String, String)>>,
    instance_number: AtomicI64,
}

impl<S> StickyStrategy<S> {
    /// Sticks to what `master` picks.
    pub fn new(master: S) -> Self {
        StickyStrategy {
            master,
            ours: Mutex::new(None),
            instance_number: AtomicI64::new(-1),
        }
    }

    /// How many times an instance was picked, less one: it changes when
    /// the instance changes (Curator's `getInstanceNumber`).
    pub fn instance_number(&self) -> i64 {
        self.instance_number.load(Ordering::Relaxed)
    }
}

impl<T, S: ProviderStrategy<T>> ProviderStrategy<T> for StickyStrategy<S> {
    fn choose(&self, instances: &[ServiceInstance<T>]) -> Option<usize> {
        let mut ours = self.ours.lock();
        if let Some((name, id)) = ours.as_ref() {
            if let Some(i) = instances
                .iter()
                .position(|x| &x.name == name && &x.id == id)
            {
                return Some(i);
            }
        }
        *ours = None;
        let i = self.master.choose(instances)?;
        let chosen = instances.get(i)?;
        *ours = Some((chosen.name.clone(), chosen.id.clone()));
        self.instance_number.fetch_add(1, Ordering::Relaxed);
        Some(i)
    }
}

impl<T, S: ProviderStrategy<T> + ?Sized> ProviderStrategy<T> for Box<S> {
    fn choose(&self, instances: &[ServiceInstance<T>]) -> Option<usize> {
        (**self).choose(instances)
    }
}

impl<T, S: ProviderStrategy<T> + ?Sized> ProviderStrategy<T> for std::sync::Arc<S> {
    fn choose(&self, instances: &[ServiceInstance<T>]) -> Option<usize> {
        (**self).choose(instances)
    }
}
