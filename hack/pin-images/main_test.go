package main

import (
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// pin against a real registry (go-containerregistry's in-memory one, over
// HTTP on loopback): each image ARG gets the digest the registry serves for
// its tag, an old digest is replaced, everything else is kept byte for byte.
func TestPin(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")

	push := func(ref string) string {
		t.Helper()
		img, err := random.Image(512, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := crane.Push(img, ref); err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	pushIndex := func(ref string) string {
		t.Helper()
		idx, err := random.Index(256, 1, 2) // a multi-platform image
		if err != nil {
			t.Fatal(err)
		}
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.WriteIndex(r, idx); err != nil {
			t.Fatal(err)
		}
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	goRef, baseRef, nonrootRef := host+"/library/golang:1.26.8", host+"/distroless/static:latest", host+"/distroless/static:nonroot"
	goDigest, baseDigest, nonrootDigest := pushIndex(goRef), push(baseRef), push(nonrootRef)

	old := "@sha256:" + strings.Repeat("0", 64)
	in := "# syntax=docker/dockerfile:1\n" +
		"ARG GO_IMAGE=" + goRef + "\n" +
		"ARG BASE_IMAGE=" + baseRef + old + "\n" +
		"ARG BASE_IMAGE_NONROOT=" + nonrootRef + "\n" +
		"ARG VERSION=v0.1.0\n" +
		"FROM ${GO_IMAGE} AS build\n"
	want := "# syntax=docker/dockerfile:1\n" +
		"ARG GO_IMAGE=" + goRef + "@" + goDigest + "\n" +
		"ARG BASE_IMAGE=" + baseRef + "@" + baseDigest + "\n" +
		"ARG BASE_IMAGE_NONROOT=" + nonrootRef + "@" + nonrootDigest + "\n" +
		"ARG VERSION=v0.1.0\n" +
		"FROM ${GO_IMAGE} AS build\n"
	got, err := pin([]byte(in), func(ref string) (string, error) { return crane.Digest(ref) })
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("pinned:\n%s\nwant:\n%s", got, want)
	}

	// A tag the registry does not have stops it, naming the reference.
	if _, err := pin([]byte("ARG X_IMAGE="+host+"/nothing:here\n"), func(ref string) (string, error) { return crane.Digest(ref) }); err == nil ||
		!strings.Contains(err.Error(), host+"/nothing:here") {
		t.Errorf("missing tag: %v", err)
	}
	if _, err := pin([]byte("FROM scratch\n"), func(string) (string, error) { return "", nil }); err == nil {
		t.Error("a file without image ARGs passed")
	}
}

// The repository's Containerfile has its three images on ARG lines that pin
// rewrites (so make pin-images pins every FROM).
func TestContainerfileIsPinnable(t *testing.T) {
	in, err := os.ReadFile("../../Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	if _, err := pin(in, func(ref string) (string, error) {
		refs = append(refs, ref)
		return "sha256:" + strings.Repeat("a", 64), nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"docker.io/library/golang:1.26.8", "gcr.io/distroless/static-debian12:latest", "gcr.io/distroless/static-debian12:nonroot"}
	if strings.Join(refs, " ") != strings.Join(want, " ") {
		t.Errorf("pinnable references %v, want %v", refs, want)
	}
	for _, l := range strings.Split(string(in), "\n") {
		if strings.HasPrefix(l, "FROM ") && !strings.Contains(l, "${") && !strings.HasPrefix(l, "FROM build") {
			t.Errorf("FROM without an ARG image: %q", l)
		}
	}
}
