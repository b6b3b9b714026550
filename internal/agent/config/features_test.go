package config_test

// The features are registered by the registry (internal/agent/feature/registry's
// init), as in the agent: this package's tests load configurations with
// --features and the dns feature's options, which only the registry knows.
import _ "github.com/flowlens/flowlens/internal/agent/feature/registry"
