package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flowlens/flowlens/internal/shared/kubeauth"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// collectorSelector finds the collector pods (manifests/flowlens-collector.yaml).
const collectorSelector = "app.kubernetes.io/name=flowlens-collector"

// defaultGRPCPort is the collector's --listen port when its pod names none.
const defaultGRPCPort = 9990

// forwards are the port-forwards to the collector pods: addrs on loopback.
type forwards struct {
	addrs []string
	pods  map[string]string // addr: namespace/pod, for the messages
	kube  *rest.Config      // the kubeconfig's, which found them
	stop  chan struct{}
}

func (f *forwards) close() { close(f.stop) }

// forwardCollectors finds the running collector pods of o's namespace
// with the kubeconfig (as kubectl does: --kubeconfig, $KUBECONFIG,
// ~/.kube/config; --context) and port-forwards a local port to each one's
// port (observe: grpcPort; ui: uiPort).
func forwardCollectors(ctx context.Context, o *options, port func(corev1.Pod) int, stderr io.Writer) (*forwards, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.kubeCtx}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no --server, and no cluster to find collectors in: %w", err)
	}
	cfg.UserAgent = "flowlens-observe"
	pods, err := collectorPods(ctx, cfg, o.namespace)
	if err != nil {
		return nil, err
	}
	f := &forwards{kube: cfg, pods: map[string]string{}, stop: make(chan struct{})}
	for _, pod := range pods {
		addr, err := forward(cfg, pod, port(pod), f.stop, stderr)
		if err != nil {
			f.close()
			return nil, fmt.Errorf("port-forward to %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		f.addrs = append(f.addrs, addr)
		f.pods[addr] = "pod " + pod.Namespace + "/" + pod.Name
	}
	return f, nil
}

// collectorPods lists the running collector pods of namespace.
func collectorPods(ctx context.Context, cfg *rest.Config, namespace string) ([]corev1.Pod, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	list, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: collectorSelector})
	if err != nil {
		if apierrors.IsForbidden(err) {
			// Name the shipped Role, as the collector names the ClusterRole.
			return nil, fmt.Errorf("listing the collector pods in namespace %s: %w; an administrator can bind the Role %s of that namespace to you", namespace, err, kubeauth.ObserveRole)
		}
		return nil, fmt.Errorf("listing the collector pods in namespace %s: %w", namespace, err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no running collector pod (%s) in namespace %s: install manifests/flowlens-collector.yaml, or give --server or -n", collectorSelector, namespace)
	}
	return out, nil
}

// grpcPort is the pod's container port named grpc, or the default.
func grpcPort(pod corev1.Pod) int {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == "grpc" {
				return int(p.ContainerPort)
			}
		}
	}
	return defaultGRPCPort
}

// forward port-forwards a free loopback port to pod's port until stop
// closes, as kubectl port-forward does, and returns the local address.
func forward(cfg *rest.Config, pod corev1.Pod, port int, stop chan struct{}, stderr io.Writer) (string, error) {
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return "", err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	url := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, url)
	ready := make(chan struct{})
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stop, ready, io.Discard, stderr)
	if err != nil {
		return "", err
	}
	failed := make(chan error, 1)
	go func() { failed <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-failed:
		if err == nil {
			err = errors.New("stopped")
		}
		return "", err
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) == 0 {
		return "", fmt.Errorf("no local port: %v", err)
	}
	return "127.0.0.1:" + strconv.Itoa(int(ports[0].Local)), nil
}
