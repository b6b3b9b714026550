package render

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/collector/collectoropt"
	"github.com/flowlens/flowlens/internal/operator/certs"
)

// The Kafka collector: with a kafka exporter, the operator runs flowlens
// collectors that consume its topic as one consumer group (docs/operator.md
// says why the operator owns these, while the gRPC collector is a manifest).
const (
	// CollectorName names the Deployment, its container's ServiceAccount,
	// ClusterRole, ClusterRoleBinding, metrics Service and ConfigMap (the
	// web configuration of spec.collector.metricsTLS). It differs from
	// manifests/flowlens-collector.yaml's flowlens-collector, so both can run.
	CollectorName = "flowlens-collector-kafka"
	// CollectorComponent is the LabelComponent value of the Kafka
	// collector's objects.
	CollectorComponent = "collector"
	// KafkaGroup is the collectors' Kafka consumer group: the collector's
	// --kafka-group default.
	KafkaGroup = collectoropt.DefaultKafkaGroup
	// CollectorMetricsPort is where the collector serves /metrics, /healthz
	// and /readyz: its --metrics-address default.
	CollectorMetricsPort = collectoropt.DefaultMetricsPort
	// The collectors' serving certificate (Secret certs.CollectorTLSName),
	// in the Kafka collector's and manifests/flowlens-collector.yaml's
	// container.
	CollectorTLSDir      = ConfigDir + "/tls"
	CollectorTLSCertPath = CollectorTLSDir + "/tls.crt"
	CollectorTLSKeyPath  = CollectorTLSDir + "/tls.key"
)

// ReviewRules are what a collector that authorizes calls (--auth
// kubernetes) asks the API server: TokenReviews (who is the caller) and
// SubjectAccessReviews (may it Export, or GetFlows).
func ReviewRules() []*rbacv1ac.PolicyRuleApplyConfiguration {
	return []*rbacv1ac.PolicyRuleApplyConfiguration{
		rbacv1ac.PolicyRule().WithAPIGroups("authentication.k8s.io").WithResources("tokenreviews").WithVerbs("create"),
		rbacv1ac.PolicyRule().WithAPIGroups("authorization.k8s.io").WithResources("subjectaccessreviews").WithVerbs("create"),
	}
}

// CollectorObjects are the Kafka collector's apply configurations.
type CollectorObjects struct {
	ServiceAccount     *corev1ac.ServiceAccountApplyConfiguration
	ClusterRole        *rbacv1ac.ClusterRoleApplyConfiguration
	ClusterRoleBinding *rbacv1ac.ClusterRoleBindingApplyConfiguration
	// ConfigMap holds the collector's files: WebConfigKey with
	// spec.collector.metricsTLS, nothing without (it exists whenever the
	// collector does, so that metricsTLS coming and going never leaves one
	// behind).
	ConfigMap  *corev1ac.ConfigMapApplyConfiguration
	Deployment *appsv1ac.DeploymentApplyConfiguration
	Service    *corev1ac.ServiceApplyConfiguration
	// ConfigHash is the value of ConfigHashAnnotation on the Deployment's
	// pod template: a hash of the collector's arguments and web
	// configuration.
	ConfigHash string
}

func collectorLabels() map[string]string {
	return map[string]string{
		LabelName:      CollectorName,
		LabelPartOf:    "flowlens",
		LabelComponent: CollectorComponent,
		LabelManagedBy: ManagedByValue,
	}
}

// collectorSelector selects the Kafka collector pods; a Deployment's
// selector is immutable, so these never change.
func collectorSelector() map[string]string {
	return map[string]string{LabelName: CollectorName, LabelPartOf: "flowlens"}
}

// buildCollector renders the Kafka collector for the kafka exporter k.
func buildCollector(fc *v1alpha1.FlowCollector, k *v1alpha1.KafkaExporter, opts Options, owner *metav1ac.OwnerReferenceApplyConfiguration) (*CollectorObjects, error) {
	ns := fc.Spec.Namespace
	labels := collectorLabels()
	o := &CollectorObjects{}
	o.ServiceAccount = corev1ac.ServiceAccount(CollectorName, ns).
		WithLabels(labels).
		WithOwnerReferences(owner)

	// Read-only, and only what enrichment resolves addresses with: the
	// rules of manifests/flowlens-collector.yaml, and the reviews that
	// authorize each call of the service map (and of gRPC, when served) as
	// system:auth-delegator does.
	rules := []*rbacv1ac.PolicyRuleApplyConfiguration{
		rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("pods", "services", "nodes").WithVerbs("get", "list", "watch"),
		rbacv1ac.PolicyRule().WithAPIGroups("apps").WithResources("replicasets").WithVerbs("get", "list", "watch"),
		rbacv1ac.PolicyRule().WithAPIGroups("batch").WithResources("jobs").WithVerbs("get", "list", "watch"),
	}
	rules = append(rules, ReviewRules()...)
	o.ClusterRole = rbacv1ac.ClusterRole(CollectorName).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithRules(rules...)
	o.ClusterRoleBinding = rbacv1ac.ClusterRoleBinding(CollectorName).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(CollectorName)).
		WithSubjects(rbacv1ac.Subject().WithKind(rbacv1.ServiceAccountKind).WithName(CollectorName).WithNamespace(ns))

	o.Service = metricsService(CollectorName, ns, labels, collectorSelector(), CollectorMetricsPort, owner)

	tls := fc.Spec.Collector.MetricsTLS
	plain := fc.Spec.MetricsPlaintext
	web, err := WebConfig(tls, plain, "spec.collector.metricsTLS")
	if err != nil {
		return nil, err
	}
	data := map[string]string{}
	if web != nil {
		data[WebConfigKey] = string(web)
	}
	o.ConfigMap = corev1ac.ConfigMap(CollectorName, ns).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithData(data)

	args := CollectorArgs(k, metricsHTTPS(tls, plain), fc.Spec.Collector.ServeGRPC)
	o.ConfigHash = Hash([]byte(strings.Join(args, "\n") + "\n" + string(web)))
	o.Deployment = collectorDeployment(fc, args, k, opts, owner, o.ConfigHash)
	return o, nil
}

// CollectorArgs are the collector's flags for the kafka exporter k: the
// agents' brokers, topic, TLS and SASL, the consumer group, no gRPC API
// unless serveGRPC (spec.collector.serveGRPC), the service map on the pod's
// loopback (every call authorized), and metrics only (the flows
// are counted in the metrics, not printed), over TLS with metricsTLS
// (unless spec.metricsPlaintext with no spec.collector.metricsTLS).
func CollectorArgs(k *v1alpha1.KafkaExporter, metricsTLS bool, serveGRPC bool) []string {
	args := []string{
		"--kafka-brokers=" + strings.Join(k.Brokers, ","),
		"--kafka-topic=" + k.Topic,
		"--kafka-group=" + KafkaGroup,
	}
	if serveGRPC {
		// The gRPC API over TLS with the certificate of spec.tls, every
		// call authorized by the API server.
		args = append(args, "--listen=:"+strconv.Itoa(CollectorGRPCPort),
			"--tls-cert="+CollectorTLSCertPath, "--tls-key="+CollectorTLSKeyPath, "--auth="+collectoropt.AuthKubernetes)
	} else {
		// Kafka only: nothing to reach but the metrics port (and the
		// service map on the pod's loopback, authorized by the API server).
		args = append(args, "--listen=", "--auth="+collectoropt.AuthKubernetes)
	}
	// The service map (docs/ui.md) from the history, on the pod's
	// loopback: reached only through flowlens ui's port-forward.
	args = append(args, "--ui-listen=127.0.0.1:"+strconv.Itoa(collectoropt.DefaultUIPort))
	if tls, ca, cert, key := tlsPaths(k.TLS, KafkaTLSCAPath, KafkaTLSCertPath, KafkaTLSKeyPath); tls {
		args = append(args, "--kafka-tls=true")
		if ca != "" {
			args = append(args, "--kafka-tls-ca="+ca)
		}
		if cert != "" {
			args = append(args, "--kafka-tls-cert="+cert, "--kafka-tls-key="+key)
		}
	}
	if k.SASL != nil {
		args = append(args, "--kafka-sasl-mechanism="+string(k.SASL.Mechanism), "--kafka-sasl-password-file="+KafkaPasswordPath)
	}
	args = append(args, "--metrics-address=:"+strconv.Itoa(CollectorMetricsPort))
	if metricsTLS {
		args = append(args, "--web-config-file="+WebConfigPath)
	}
	return append(args, "--output="+collectoropt.OutputNone)
}

func collectorDeployment(fc *v1alpha1.FlowCollector, args []string, k *v1alpha1.KafkaExporter, opts Options, owner *metav1ac.OwnerReferenceApplyConfiguration, hash string) *appsv1ac.DeploymentApplyConfiguration {
	c := &fc.Spec.Collector
	image := c.Image
	if image == "" {
		image = opts.DefaultCollectorImage
	}
	plain := fc.Spec.MetricsPlaintext
	probe := func(path string) *corev1ac.ProbeApplyConfiguration { return metricsProbe(c.MetricsTLS, plain, path) }
	container := corev1ac.Container().
		WithName("collector").
		WithImage(image).
		WithImagePullPolicy(c.ImagePullPolicy).
		WithArgs(args...).
		WithEnv(kafkaEnv(k, collectorKafkaUsernameEnv)...).
		WithPorts(corev1ac.ContainerPort().WithName("metrics").WithContainerPort(CollectorMetricsPort).WithProtocol(corev1.ProtocolTCP)).
		WithResources(resources(c.Resources)).
		WithReadinessProbe(probe("/readyz")).
		WithLivenessProbe(probe("/healthz")).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		WithSecurityContext(corev1ac.SecurityContext().
			WithAllowPrivilegeEscalation(false).
			WithReadOnlyRootFilesystem(true).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")))
	podSpec := corev1ac.PodSpec().
		WithServiceAccountName(CollectorName).
		// No Docker-link variables: the Service flowlens-collector of
		// manifests/ in the same namespace would set
		// FLOWLENS_COLLECTOR_PORT=tcp://..., which the collector reads as
		// its --port option and refuses (found on a real kubelet).
		WithEnableServiceLinks(false).
		WithSecurityContext(corev1ac.PodSecurityContext().
			WithRunAsNonRoot(true).
			WithRunAsUser(65532).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
		WithNodeSelector(map[string]string{corev1.LabelOSStable: "linux"})
	annotations := map[string]string{
		"prometheus.io/scrape": "true",
		"prometheus.io/port":   strconv.Itoa(CollectorMetricsPort),
		ConfigHashAnnotation:   hash,
	}
	if metricsHTTPS(c.MetricsTLS, plain) {
		// The web configuration, from the collector's ConfigMap; the
		// Secrets are mounted beneath, with kafka's.
		podSpec.WithVolumes(corev1ac.Volume().WithName("config").WithConfigMap(
			corev1ac.ConfigMapVolumeSource().WithName(CollectorName)))
		container.WithVolumeMounts(corev1ac.VolumeMount().WithName("config").WithMountPath(ConfigDir).WithReadOnly(true))
		annotations["prometheus.io/scheme"] = "https"
	}
	mounts := append(metricsTLSMounts(c.MetricsTLS, plain), kafkaMounts(k)...)
	if c.ServeGRPC {
		mounts = append(mounts, secretMount{"tls", certs.CollectorTLSName, CollectorTLSDir,
			[][2]string{{corev1.TLSCertKey, "tls.crt"}, {corev1.TLSPrivateKeyKey, "tls.key"}}})
		container.WithPorts(corev1ac.ContainerPort().WithName("grpc").WithContainerPort(CollectorGRPCPort).WithProtocol(corev1.ProtocolTCP))
	}
	for _, m := range mounts {
		podSpec.WithVolumes(m.volume())
		container.WithVolumeMounts(m.mount())
	}
	podSpec.WithContainers(container)
	for _, s := range fc.Spec.Agent.ImagePullSecrets {
		podSpec.WithImagePullSecrets(corev1ac.LocalObjectReference().WithName(s.Name))
	}

	return appsv1ac.Deployment(CollectorName, fc.Spec.Namespace).
		WithLabels(collectorLabels()).
		WithOwnerReferences(owner).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(c.Replicas).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(collectorSelector())).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(collectorLabels()).
				WithAnnotations(annotations).
				WithSpec(podSpec)))
}
