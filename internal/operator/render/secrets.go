package render

import (
	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/flowlens/flowlens/api/v1alpha1"
)

// The variables a value from a Secret goes in: a variable rather than the
// configuration file or an argument, since the operator never reads Secrets
// and a variable does not show in the process list of the node, as
// arguments do. The agent's are named by its configuration (config.EnvName);
// the collector's follow package cliconf's rule, its prefix and the flag's
// name (--kafka-sasl-username is FLOWLENS_COLLECTOR_KAFKA_SASL_USERNAME),
// and cmd/flowlens-collector's TestOperatorArgs loads them.
const collectorKafkaUsernameEnv = "FLOWLENS_COLLECTOR_KAFKA_SASL_USERNAME"

// secretMount is keys of a Secret mounted as files in a directory.
type secretMount struct {
	name     string // volume name
	secret   string // Secret name
	dir      string // mount path
	keyPaths [][2]string
}

func (m secretMount) volume() *corev1ac.VolumeApplyConfiguration {
	src := corev1ac.SecretVolumeSource().WithSecretName(m.secret)
	for _, kp := range m.keyPaths {
		src.WithItems(corev1ac.KeyToPath().WithKey(kp[0]).WithPath(kp[1]))
	}
	return corev1ac.Volume().WithName(m.name).WithSecret(src)
}

func (m secretMount) mount() *corev1ac.VolumeMountApplyConfiguration {
	return corev1ac.VolumeMount().WithName(m.name).WithMountPath(m.dir).WithReadOnly(true)
}

// tlsMounts mounts a CA bundle as caDir/ca.crt and a client certificate as
// certDir/tls.crt and tls.key, in volumes named name-ca and name-client.
func tlsMounts(name string, ca *v1alpha1.SecretKeyRef, client *v1alpha1.SecretRef, caDir, certDir string) []secretMount {
	var out []secretMount
	if ca != nil {
		out = append(out, secretMount{name + "-ca", ca.Name, caDir, [][2]string{{ca.Key, "ca.crt"}}})
	}
	if client != nil {
		out = append(out, secretMount{name + "-client", client.Name, certDir,
			[][2]string{{corev1.TLSCertKey, "tls.crt"}, {corev1.TLSPrivateKeyKey, "tls.key"}}})
	}
	return out
}

// kafkaMounts are the kafka exporter's TLS Secrets and SASL password, the
// same in the agent and the collector.
func kafkaMounts(k *v1alpha1.KafkaExporter) []secretMount {
	var out []secretMount
	if k.TLS != nil {
		out = tlsMounts("kafka-tls", k.TLS.CASecretRef, k.TLS.ClientSecretRef, KafkaTLSCADir, KafkaTLSCertDir)
	}
	if k.SASL != nil {
		out = append(out, secretMount{"kafka-sasl", k.SASL.SecretRef.Name, KafkaSASLDir,
			[][2]string{{KafkaSASLPasswordKey, KafkaSASLPasswordKey}}})
	}
	return out
}

// kafkaEnv is the SASL username, from its Secret, as the binary's
// --kafka-sasl-username variable, name.
func kafkaEnv(k *v1alpha1.KafkaExporter, name string) []*corev1ac.EnvVarApplyConfiguration {
	if k.SASL == nil {
		return nil
	}
	return []*corev1ac.EnvVarApplyConfiguration{secretEnv(name, k.SASL.SecretRef.Name, KafkaSASLUsernameKey)}
}

func secretEnv(name, secret, key string) *corev1ac.EnvVarApplyConfiguration {
	return corev1ac.EnvVar().WithName(name).WithValueFrom(corev1ac.EnvVarSource().
		WithSecretKeyRef(corev1ac.SecretKeySelector().WithName(secret).WithKey(key)))
}
