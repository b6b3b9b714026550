// Package v1alpha1 is the flowlens.io/v1alpha1 API: the cluster-scoped
// FlowCollector resource from which the flowlens operator runs the flow agent
// on every node as a DaemonSet.
//
// The types carry kubebuilder markers; controller-gen turns them into the
// deep-copy code (zz_generated.deepcopy.go) and the CRD in config/crd/bases
// (make generate-operator).
//
// +kubebuilder:object:generate=true
// +groupName=flowlens.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "flowlens.io", Version: "v1alpha1"}

	// SchemeBuilder registers this API's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this API's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
