// Package collectoropt holds the collector's defaults that another program
// writes into a collector's configuration: the operator's renderer gives its
// Kafka collectors these arguments. It imports nothing, so the operator links
// these constants and not the collector (gRPC, the Kafka client, the
// history): the same reason the DNS feature's options live in dnsopt.
// internal/collector's option table takes its defaults from here, so each is
// written once.
package collectoropt

const (
	// DefaultKafkaGroup is --kafka-group's default: the consumer group the
	// collectors of a cluster share.
	DefaultKafkaGroup = "flowlens-collector"
	// DefaultMetricsPort is the port of --metrics-address's default.
	DefaultMetricsPort = 9401
	// DefaultUIPort is the service map's port (--ui-listen) the operator
	// and the chart give collectors with a history, on the pod's loopback
	// (127.0.0.1): flowlens ui port-forwards to it, nothing else reaches it.
	DefaultUIPort = 9402
	// OutputNone is the --output that prints nothing (metrics and history
	// only); OutputJSON (the default) and OutputTable print.
	OutputNone  = "none"
	OutputJSON  = "json"
	OutputTable = "table"
	// AuthAuto (the default --auth) is AuthKubernetes when the collector
	// reaches a Kubernetes API server (in a cluster or with --kubeconfig),
	// AuthNone otherwise. AuthKubernetes authorizes every Export and
	// GetFlows call with TokenReview and SubjectAccessReview; AuthNone
	// authorizes nothing (docs/security.md says when that is acceptable).
	AuthAuto       = "auto"
	AuthKubernetes = "kubernetes"
	AuthNone       = "none"
)
