// Package kafkatest runs a real single-node Apache Kafka broker (KRaft,
// combined broker and controller) for tests, behind internal/testkit's gate:
// skipped in short mode, skipped outside CI when Java or the broker's jars
// are missing, failed in CI when they are.
//
// The jars are kafka_2.13 and its dependencies from Maven Central, fetched
// once by hack/kafka/fetch.sh (`make deps-test`) into
// $FLOWLENS_CACHE (default <user cache dir>/flowlens)/kafka/<version>/libs,
// the version that of hack/kafka/pom.xml. Each broker gets its own temp dir
// (config, data, log) and free ports, and is killed at the test's cleanup.
//
// Three listeners: Addr is plaintext without authentication; SASLAddr
// takes SASL PLAIN and SCRAM-SHA-512 (credentials User/Password, the SCRAM
// ones formatted into the storage, as KRaft requires) over plaintext TCP;
// TLSAddr is TLS with client certificates required (mTLS), from PKI.
package kafkatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// What names the need in skip and failure messages.
const What = "an Apache Kafka broker (Java 17+, jars from hack/kafka/fetch.sh)"

// The SASL credentials the broker accepts (PLAIN and SCRAM-SHA-512).
const (
	User     = "flowlens"
	Password = "flowlens-test-secret"
)

// Broker is a running (or stopped, see Stop) single-node Kafka.
type Broker struct {
	// Addr is the plaintext listener's host:port, SASLAddr the SASL one's,
	// TLSAddr the mTLS one's.
	Addr, SASLAddr, TLSAddr string
	// PKI issued the TLS listener's certificate (for 127.0.0.1) and a
	// client certificate it accepts (ClientCert, ClientKey).
	PKI *receivertest.PKI

	t          testing.TB
	libs, dir  string
	conf       string
	cmd        *exec.Cmd
	exited     chan struct{}
	logFile    *os.File
	controller string
}

// Libs returns the directory of the broker's jars, or why it is missing
// (and how to get it).
func Libs() (string, error) {
	if _, err := exec.LookPath("java"); err != nil {
		return "", errors.New("no java in PATH; run `make deps-test` (hack/kafka/fetch.sh installs a JRE)")
	}
	root, err := testkit.ModuleRoot()
	if err != nil {
		return "", err
	}
	pom, err := os.ReadFile(filepath.Join(root, "hack", "kafka", "pom.xml"))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`<kafka.version>([^<]+)</kafka.version>`).FindSubmatch(pom)
	if m == nil {
		return "", errors.New("hack/kafka/pom.xml names no kafka.version")
	}
	base, err := testkit.CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(base, "kafka", string(m[1]))
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		return "", fmt.Errorf("no Kafka %s jars in %s; run `make deps-test` or hack/kafka/fetch.sh", m[1], dir)
	}
	return filepath.Join(dir, "libs"), nil
}

// Start formats a fresh broker's storage in a temp dir, starts it on free
// ports and waits until it serves metadata. It is killed at t's cleanup.
func Start(t testing.TB) *Broker {
	t.Helper()
	libs, missing := Libs()
	testkit.Need(t, What, missing)
	ports := freePorts(t, 4)
	b := &Broker{t: t, libs: libs, dir: t.TempDir(),
		Addr: ports[0], controller: ports[1], SASLAddr: ports[2], TLSAddr: ports[3], PKI: receivertest.NewPKI(t)}
	b.conf = filepath.Join(b.dir, "server.properties")
	if err := b.writeKeystore(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.conf, []byte(b.properties()), 0o600); err != nil {
		t.Fatal(err)
	}
	b.format()
	t.Cleanup(b.kill)
	b.Restart()
	return b
}

// properties is the broker's configuration: small, single node, and quick
// to hand out partitions (no initial rebalance delay).
func (b *Broker) properties() string {
	jaas := func(module, extra string) string {
		return "org.apache.kafka.common.security." + module + " required" + extra + ";"
	}
	return strings.Join([]string{
		"process.roles=broker,controller",
		"node.id=1",
		"controller.quorum.voters=1@" + b.controller,
		"listeners=PLAINTEXT://" + b.Addr + ",CONTROLLER://" + b.controller + ",SASL_PLAINTEXT://" + b.SASLAddr + ",SSL://" + b.TLSAddr,
		"advertised.listeners=PLAINTEXT://" + b.Addr + ",SASL_PLAINTEXT://" + b.SASLAddr + ",SSL://" + b.TLSAddr,
		"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL",
		"listener.name.ssl.ssl.keystore.type=PEM",
		"listener.name.ssl.ssl.keystore.location=" + filepath.Join(b.dir, "keystore.pem"),
		"listener.name.ssl.ssl.truststore.type=PEM",
		"listener.name.ssl.ssl.truststore.location=" + b.PKI.CA,
		"listener.name.ssl.ssl.client.auth=required",
		"controller.listener.names=CONTROLLER",
		"inter.broker.listener.name=PLAINTEXT",
		"log.dirs=" + filepath.Join(b.dir, "data"),
		"num.partitions=1",
		"offsets.topic.replication.factor=1",
		"offsets.topic.num.partitions=4",
		"transaction.state.log.replication.factor=1",
		"transaction.state.log.min.isr=1",
		"share.coordinator.state.topic.replication.factor=1",
		"share.coordinator.state.topic.min.isr=1",
		"group.initial.rebalance.delay.ms=0",
		"num.network.threads=2",
		"num.io.threads=2",
		"background.threads=2",
		"sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
		"listener.name.sasl_plaintext.plain.sasl.jaas.config=" +
			jaas("plain.PlainLoginModule", fmt.Sprintf(" user_%s=%q", User, Password)),
		"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=" + jaas("scram.ScramLoginModule", ""),
	}, "\n") + "\n"
}

// writeKeystore writes the TLS listener's PEM keystore: the server key in
// PKCS #8 (what Kafka reads) and its certificate.
func (b *Broker) writeKeystore() error {
	keyPEM, err := os.ReadFile(b.PKI.ServerKey)
	if err != nil {
		return err
	}
	blk, _ := pem.Decode(keyPEM)
	if blk == nil {
		return errors.New("no PEM in the server key")
	}
	key, err := x509.ParseECPrivateKey(blk.Bytes)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(b.PKI.ServerCert)
	if err != nil {
		return err
	}
	out := append(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), cert...)
	return os.WriteFile(filepath.Join(b.dir, "keystore.pem"), out, 0o600)
}

// java returns the command running class with args on the broker's jars,
// with a small heap and a quick start (C1 only). Its temporary files (the
// native lz4 library it unpacks, 150 KiB per start, which a killed JVM
// never deletes) go to the broker's directory, removed with the test, and
// it writes no hsperfdata.
func (b *Broker) java(class string, args ...string) *exec.Cmd {
	a := []string{"-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
		"-Djava.io.tmpdir=" + b.dir,
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Djava.awt.headless=true",
		"-cp", filepath.Join(b.libs, "*"), class}
	cmd := exec.Command("java", append(a, args...)...)
	cmd.Dir = b.dir
	// Its own process group, killed whole at cleanup (and by the kernel if
	// the test binary dies first: see testkit.StartOwned).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// format writes the KRaft metadata, with the SCRAM credentials.
func (b *Broker) format() {
	b.t.Helper()
	// A cluster id is 16 random bytes in URL-safe base64. One starting
	// with '-' would be read as an option by the tool's argument parser
	// (1 run in 64 failed so: CI caught it), so draw again, as Kafka's own
	// Uuid.randomUuid does.
	var clusterID string
	for clusterID == "" || clusterID[0] == '-' {
		id := make([]byte, 16)
		_, _ = rand.Read(id)
		clusterID = base64.RawURLEncoding.EncodeToString(id)
	}
	cmd := b.java("kafka.tools.StorageTool", "format",
		"-t", clusterID, "-c", b.conf,
		"--add-scram", fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", User, Password))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := testkit.StartOwned(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		b.t.Fatalf("kafka storage format: %v\n%s", err, out.String())
	}
}

// Restart starts the broker (again, after Stop: same data, same ports) and
// waits until it serves metadata.
func (b *Broker) Restart() {
	b.t.Helper()
	if b.cmd != nil {
		b.t.Fatal("kafkatest: Restart of a running broker")
	}
	logFile, err := os.OpenFile(filepath.Join(b.dir, "broker.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		b.t.Fatal(err)
	}
	cmd := b.java("kafka.Kafka", b.conf)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := testkit.StartOwned(cmd); err != nil {
		logFile.Close()
		b.t.Fatalf("start kafka: %v", err)
	}
	b.cmd, b.logFile, b.exited = cmd, logFile, make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(cmd, b.exited)
	if err := b.waitReady(90 * time.Second); err != nil {
		b.t.Fatalf("kafka broker not ready: %v\n%s", err, b.Log())
	}
}

// waitReady polls the broker's metadata until it lists itself.
func (b *Broker) waitReady(limit time.Duration) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.RetryTimeout(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var last error
	for {
		select {
		case <-b.exited:
			return errors.New("the broker exited")
		default:
		}
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		if err == nil && len(resp.Brokers) > 0 {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop shuts the broker down cleanly (SIGTERM; SIGKILL after 30 s). Its
// data stays for Restart.
func (b *Broker) Stop() {
	b.t.Helper()
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		<-b.exited
	}
	b.logFile.Close()
	b.cmd = nil
}

// Pause stops the broker's process group with SIGSTOP: its connections
// stay open and its sockets take what fits in their buffers, but it
// answers nothing (a stuck broker, not a dead one). Resume continues it;
// the cleanup kills a paused broker too.
func (b *Broker) Pause() { b.signal(syscall.SIGSTOP) }

// Resume continues a paused broker (SIGCONT).
func (b *Broker) Resume() { b.signal(syscall.SIGCONT) }

func (b *Broker) signal(sig syscall.Signal) {
	b.t.Helper()
	if b.cmd == nil {
		b.t.Fatalf("kafkatest: %v to a broker that is not running", sig)
	}
	if err := syscall.Kill(-b.cmd.Process.Pid, sig); err != nil {
		b.t.Fatalf("kafkatest: %v: %v", sig, err)
	}
}

// kill is the cleanup: no clean shutdown needed, the data goes away.
func (b *Broker) kill() {
	if b.cmd == nil {
		return
	}
	_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	<-b.exited
	b.logFile.Close()
	b.cmd = nil
}

// Log is the broker's output so far, for failure messages.
func (b *Broker) Log() string {
	out, _ := os.ReadFile(filepath.Join(b.dir, "broker.log"))
	if len(out) > 8000 {
		out = out[len(out)-8000:]
	}
	return string(out)
}

// CreateTopic creates topic with the given partitions, retrying while the
// controller is still settling.
func (b *Broker) CreateTopic(topic string, partitions int32) {
	b.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
	if err != nil {
		b.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30000
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
			if err == nil || errors.Is(err, kerr.TopicAlreadyExists) {
				err = hasLeaders(ctx, cl, topic, partitions)
				if err == nil {
					return
				}
			}
		}
		if ctx.Err() != nil {
			b.t.Fatalf("create topic %s: %v\n%s", topic, err, b.Log())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// hasLeaders is nil once the broker's metadata has topic with every one of
// its partitions led: a topic just created is not served at once, and a
// producer that comes too early has its records fail with
// UNKNOWN_TOPIC_OR_PARTITION once its retries are spent (CI caught it).
func hasLeaders(ctx context.Context, cl *kgo.Client, topic string, partitions int32) error {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("metadata has %d topics", len(resp.Topics))
	}
	t := resp.Topics[0]
	if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
		return err
	}
	if int32(len(t.Partitions)) != partitions {
		return fmt.Errorf("topic %s has %d of %d partitions", topic, len(t.Partitions), partitions)
	}
	for _, p := range t.Partitions {
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			return fmt.Errorf("partition %d: %w", p.Partition, err)
		}
		if p.Leader < 0 {
			return fmt.Errorf("partition %d has no leader", p.Partition)
		}
	}
	return nil
}

// freePorts returns n distinct free loopback addresses, each reserved to
// the test (testkit.FreeAddr).
func freePorts(t testing.TB, n int) []string {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = testkit.FreeAddr(t)
	}
	return addrs
}
