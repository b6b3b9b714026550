//go:build e2e_kubelet

package kubelet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/test/e2e/cluster"
)

// checkJobWorkloads runs Jobs whose pods send to the server, on the real
// node with the real Job controller: two runs of a CronJob (Jobs named and
// owned as the CronJob controller names and owns them; the CronJob is
// suspended, so the test decides when it runs) and two Jobs made from one
// generateName. The collector names their workloads nightly (CronJob) and
// batch (Job): never a run's Job name, which would make a new metric
// label value on every run (issue #27). It also proves the collector's
// RBAC lets it watch Jobs.
func checkJobWorkloads(ctx context.Context, t *testing.T, c client.Client, cs kubernetes.Interface, collector, server *corev1.Pod) {
	t.Helper()
	const n = 3 // datagrams per run
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		AutomountServiceAccountToken:  ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To[int64](1),
		Containers: []corev1.Container{{Name: "run", Image: podtoolImage, ImagePullPolicy: corev1.PullNever,
			Args: clientArgs(server.Status.PodIP, n, 0)}},
	}}
	// The client pauses once it has sent: the test deletes the Jobs.
	spec := batchv1.JobSpec{Template: tmpl, BackoffLimit: ptr.To[int32](0)}
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: clientNamespace, Name: "nightly"},
		Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", Suspend: ptr.To(true), JobTemplate: batchv1.JobTemplateSpec{Spec: spec}}}
	if err := c.Create(ctx, cj); err != nil {
		t.Fatal(err)
	}
	owner := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "CronJob", Name: cj.Name, UID: cj.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	want := map[string][2]string{} // Job name: workload, kind
	var jobs []client.Object
	for _, run := range []string{"nightly-29000000", "nightly-29001440"} {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: clientNamespace, Name: run, OwnerReferences: []metav1.OwnerReference{owner}}, Spec: spec}
		if err := c.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
		want[j.Name] = [2]string{"nightly", "CronJob"}
		jobs = append(jobs, j)
	}
	for range 2 {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: clientNamespace, GenerateName: "batch-"}, Spec: spec}
		if err := c.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
		want[j.Name] = [2]string{"batch", "Job"}
		jobs = append(jobs, j)
	}
	for job, w := range want {
		var pod *corev1.Pod
		cluster.WaitFor(ctx, t, "the pod of Job "+job+" to send", time.Minute, func() error {
			pods := &corev1.PodList{}
			if err := c.List(ctx, pods, client.InNamespace(clientNamespace), client.MatchingLabels{"batch.kubernetes.io/job-name": job}); err != nil {
				return err
			}
			if len(pods.Items) != 1 || pods.Items[0].Status.PodIP == "" {
				return fmt.Errorf("%d pods", len(pods.Items))
			}
			pod = &pods.Items[0]
			log, err := podLog(ctx, cs, pod)
			if err != nil {
				return err
			}
			if !strings.Contains(log, "udp done") {
				return fmt.Errorf("log: %s", log)
			}
			return nil
		})
		cluster.WaitFor(ctx, t, "the collector to count the flow of Job "+job, time.Minute, func() error {
			totals, recs, err := flowTotals(ctx, cs, collector, 17, pod.Status.PodIP, server.Status.PodIP, udpPort)
			if err != nil {
				return err
			}
			var packets uint64
			for _, tot := range totals {
				packets += tot[0]
			}
			if packets < n {
				return fmt.Errorf("%d packets so far", packets)
			}
			for _, r := range recs {
				got := r.SrcK8s
				if got.Name != pod.Name || got.Workload != w[0] || got.WorkloadKind != w[1] {
					t.Errorf("Job %s: src_k8s %+v, want pod %s of workload %s, kind %s", job, got, pod.Name, w[0], w[1])
				}
			}
			return nil
		})
	}
	for _, o := range append(jobs, cj) {
		if err := c.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			t.Error(err)
		}
	}
}
