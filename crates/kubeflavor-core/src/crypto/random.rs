//! The one seam through which the copy-certs and PKI code draws randomness.
//!
//! Production code fills buffers from the operating system's CSPRNG (`getrandom`). Functions
//! that need randomness come in pairs, `f(...)` and `f_with(..., fill)`, so tests can inject
//! exact bytes (fixed nonces for the committed compatibility vectors, for instance).
//! Private keys are the exception: they are generated inside aws-lc (through rcgen), which
//! draws from the same OS source and offers no injection point.

/// The operating system's random number generator failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the operating system's random number generator failed ({0}); \
     check that /dev/urandom or getrandom(2) is available to this process"
)]
pub struct RandomnessError(String);

/// Fills `buf` from the OS CSPRNG.
pub fn os_fill(buf: &mut [u8]) -> Result<(), RandomnessError> {
    getrandom::fill(buf).map_err(|e| RandomnessError(e.to_string()))
}
