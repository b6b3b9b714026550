package config

import "io"

// Usage writes the command-line help to w. Load never prints; the caller
// calls Usage when Load returns flag.ErrHelp, and may on other errors.
func Usage(w io.Writer) { spec.Usage(w) }
