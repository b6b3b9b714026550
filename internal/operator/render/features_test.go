package render

// The tests load the rendered agent configuration with the agent's own
// loader, which knows the features (and the dns feature's options) from the
// registry, as the agent does.
import _ "github.com/flowlens/flowlens/internal/agent/feature/registry"
