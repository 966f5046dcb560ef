package claim

// The retry-hint statement, for the test that checks its plan.
const RetryHintSQL = retryHintSQL
