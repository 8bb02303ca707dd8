//! What an API server's error Status says, for the callers that act on it (a 404 that
//! means "gone", a 409 that means "someone else wrote first").

/// True for a 404 NotFound Status (the object does not exist), false for a 404 of an
/// unknown path (a CRD that is not installed answers `404 page not found` as plain text).
pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 404 && s.reason == "NotFound")
}

/// True when the API server answered with this Status reason (`AlreadyExists`, `Conflict`...).
pub fn is_api_reason(err: &kube::Error, reason: &str) -> bool {
    matches!(err, kube::Error::Api(s) if s.reason == reason)
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    fn status(code: u16, reason: &str, message: &str) -> kube::Error {
        let mut s = Status::failure(message, reason).with_code(code);
        s.reason = reason.into();
        kube::Error::Api(Box::new(s))
    }

    #[test]
    fn not_found_is_only_the_status_reason() {
        assert!(is_not_found(&status(
            404,
            "NotFound",
            "secrets \"x\" not found"
        )));
        assert!(!is_not_found(&status(
            404,
            "Failed to parse error data",
            "404 page not found"
        )));
    }
}
