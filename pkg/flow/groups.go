package flow

// Group describes one feature's group of Record fields, without the kernel:
// what a conformance test needs to check that the feature is carried by
// every encoding (docs/architecture.md, "the shape of a feature").
type Group struct {
	// Name is the feature's name, as the feature registry and --features
	// spell it ("dns"); every encoder's lookup takes it.
	Name string
	// JSONFields are the keys the group's JSON appender writes, in order.
	JSONFields []string
	// Sample sets every field of the group in r to a value other than its
	// zero: the record a test encodes to see each field come out.
	Sample func(r *Record)
	// Has reports whether r carries the group: any of its fields is set.
	Has func(r *Record) bool
}

// GroupNamed returns the group of feature name.
func GroupNamed(name string) (Group, bool) {
	for _, g := range Groups {
		if g.Name == name {
			return g, true
		}
	}
	return Group{}, false
}
