package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// rawCodec sends pre-encoded messages (*[]byte) and discards replies: the
// generator's encoding cost stays out of the run. Its name is "proto", so
// the content type is the one both servers decode.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error { data.Free(); return nil }
func (rawCodec) Name() string                                { return "proto" }

func dial(port int) (*grpc.ClientConn, error) {
	return grpc.NewClient("127.0.0.1:"+strconv.Itoa(port),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallSendMsgSize(64<<20)))
}

func pinned(core int, bin string, args ...string) *exec.Cmd {
	cmd := exec.Command("taskset", append([]string{"-c", strconv.Itoa(core), bin}, args...)...)
	cmd.Stdout = nil // FLP prints its whole configuration there
	cmd.Stderr = os.Stderr
	return cmd
}

// flowlensTarget is flowlens-collector: the agents' Export stream, enriched
// from the apiserver, the two traffic metrics only, no flow output (the
// flow history on, as by default).
type flowlensTarget struct {
	label           string // "" for flowlens
	bin, kubeconfig string
	extra           []string
	port, mport     int
	conn            *grpc.ClientConn
	stream          grpc.ClientStream
}

func (t *flowlensTarget) name() string {
	if t.label != "" {
		return t.label
	}
	return "flowlens"
}

func (t *flowlensTarget) start(core int) (*exec.Cmd, error) {
	t.port, t.mport = freePort(), freePort()
	args := append([]string{"--listen", "127.0.0.1:" + strconv.Itoa(t.port), "--insecure-plaintext", "--auth", "none",
		"--output", "none", "--kubeconfig", t.kubeconfig, "--metrics", "flow_bytes_total,flow_packets_total",
		"--metrics-address", "127.0.0.1:" + strconv.Itoa(t.mport), "--log-level", "warn"}, t.extra...)
	cmd := pinned(core, t.bin, args...)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	conn, err := dial(t.port)
	if err != nil {
		return nil, err
	}
	t.conn = conn
	return cmd, nil
}

func (t *flowlensTarget) send(ctx context.Context, msgs [][]byte) error {
	if t.stream == nil {
		s, err := t.conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, flowv1.FlowCollector_Export_FullMethodName)
		if err != nil {
			return err
		}
		t.stream = s
	}
	for i := range msgs {
		if err := t.stream.SendMsg(&msgs[i]); err != nil {
			t.stream = nil
			return err
		}
	}
	return nil
}

func (t *flowlensTarget) metrics() (string, string, []string, string) {
	return "flowlens_collector_flow_bytes_total", "flowlens_collector_flow_packets_total",
		[]string{"src_namespace", "src_workload", "dst_namespace", "dst_workload"},
		"http://127.0.0.1:" + strconv.Itoa(t.mport) + "/metrics"
}

func (t *flowlensTarget) encode(g *generator, flows []int) [][]byte { return g.flowlensBatches(flows) }

func (t *flowlensTarget) close() {
	if t.stream != nil {
		_ = t.stream.CloseSend()
	}
	if t.conn != nil {
		_ = t.conn.Close()
	}
	t.stream, t.conn = nil, nil
}

// flpTarget is flowlogs-pipeline: the gRPC ingest NetObserv's agent sends
// to, Kubernetes enrichment of both ends (the network transform's
// add_kubernetes rules, as NetObserv's operator writes them), and a prom
// encode stage with the two traffic metrics of flowlens' shape.
type flpTarget struct {
	bin, kubeconfig, dir string
	port, mport          int
	conn                 *grpc.ClientConn
}

func (t *flpTarget) name() string { return "flp" }

const flpConfig = `log-level: error
metricsSettings:
  address: 127.0.0.1
  port: %[2]d
  prefix: flp_op_
pipeline:
  - name: ingest
  - name: enrich
    follows: ingest
  - name: prom
    follows: enrich
parameters:
  - name: ingest
    ingest:
      type: grpc
      grpc:
        port: %[1]d
  - name: enrich
    transform:
      type: network
      network:
        kubeConfig:
          configPath: %[3]s
        rules:
          - type: add_kubernetes
            kubernetes:
              ipField: SrcAddr
              output: SrcK8S
          - type: add_kubernetes
            kubernetes:
              ipField: DstAddr
              output: DstK8S
  - name: prom
    encode:
      type: prom
      prom:
        prefix: flp_
        metrics:
          - name: flow_bytes_total
            type: counter
            valueKey: Bytes
            labels: [SrcK8S_Namespace, SrcK8S_OwnerName, DstK8S_Namespace, DstK8S_OwnerName]
          - name: flow_packets_total
            type: counter
            valueKey: Packets
            labels: [SrcK8S_Namespace, SrcK8S_OwnerName, DstK8S_Namespace, DstK8S_OwnerName]
`

func (t *flpTarget) start(core int) (*exec.Cmd, error) {
	t.port, t.mport = freePort(), freePort()
	cfg := filepath.Join(t.dir, "flp.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, flpConfig, t.port, t.mport, t.kubeconfig), 0o644); err != nil {
		return nil, err
	}
	cmd := pinned(core, t.bin, "--config", cfg)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	conn, err := dial(t.port)
	if err != nil {
		return nil, err
	}
	t.conn = conn
	return cmd, nil
}

func (t *flpTarget) send(ctx context.Context, msgs [][]byte) error {
	for i := range msgs {
		var reply []byte
		if err := t.conn.Invoke(ctx, "/pbflow.Collector/Send", &msgs[i], &reply); err != nil {
			return err
		}
	}
	return nil
}

func (t *flpTarget) metrics() (string, string, []string, string) {
	return "flp_flow_bytes_total", "flp_flow_packets_total",
		[]string{"SrcK8S_Namespace", "SrcK8S_OwnerName", "DstK8S_Namespace", "DstK8S_OwnerName"},
		"http://127.0.0.1:" + strconv.Itoa(t.mport) + "/metrics"
}

func (t *flpTarget) encode(g *generator, flows []int) [][]byte { return g.pbflowBatches(flows) }

func (t *flpTarget) close() {
	if t.conn != nil {
		_ = t.conn.Close()
	}
	t.conn = nil
}
