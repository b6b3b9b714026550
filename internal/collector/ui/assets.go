package ui

import (
	"embed"
	"io/fs"
)

// The page's seam: dist/ is the built service map page, embedded in the
// collector binary and served as is at "/" (dist/index.html at "/",
// dist/app.js at "/app.js", ...). See the package doc for the contract.
//
//go:embed dist
var dist embed.FS

// Page is the built page, rooted at dist/ (Options.Assets' default).
var Page = func() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is embedded: cannot happen
	}
	return sub
}()
