//! The export and import caches (pure data; unit-tested without a device).
