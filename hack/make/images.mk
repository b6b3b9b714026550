# Base images of the Containerfile pinned by digest (hack/pin-images, its own
# module). make test also runs pin-images's test (an in-memory registry on
# loopback: no network needed).

pin-images: ## pin the Containerfile's base images (ARG *_IMAGE) by digest; needs docker.io and gcr.io reachable
	$(GO) -C hack/pin-images run . $(abspath Containerfile)
	@git diff --stat -- Containerfile

test-pin-images: ## test pin-images against a real (in-memory) registry
	$(GO) -C hack/pin-images test -count=1 .

test: test-pin-images
