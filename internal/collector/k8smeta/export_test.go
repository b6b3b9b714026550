package k8smeta

// StoredPod returns the pod the cache's informer stores under key
// (namespace/name), to check what the transform left.
func StoredPod(c *Cache, key string) (any, bool) {
	obj, ok, _ := c.pods.GetIndexer().GetByKey(key)
	return obj, ok
}
