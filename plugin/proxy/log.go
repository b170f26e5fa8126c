package proxy

// LogTrace logs msg at LogLevelTrace; errors from the host are dropped (there is
// nowhere else to report them).
func LogTrace(msg string) { _ = Log(LogLevelTrace, msg) }

// LogDebug logs msg at LogLevelDebug.
func LogDebug(msg string) { _ = Log(LogLevelDebug, msg) }

// LogInfo logs msg at LogLevelInfo.
func LogInfo(msg string) { _ = Log(LogLevelInfo, msg) }

// LogWarn logs msg at LogLevelWarn.
func LogWarn(msg string) { _ = Log(LogLevelWarn, msg) }

// LogError logs msg at LogLevelError.
func LogError(msg string) { _ = Log(LogLevelError, msg) }

// LogCritical logs msg at LogLevelCritical.
func LogCritical(msg string) { _ = Log(LogLevelCritical, msg) }
