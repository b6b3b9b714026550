package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A block is one `var xBlock = block{bit: variantX, has: f ...}` of the
// IPFIX exporter, with the functions its name gives it: appendX(b, r) or
// appendX(b, r, v6) appends its data, and xVarLen(r), when there is one,
// is the content of its variable-length fields.
type block struct {
	name, bitConst, has string
	bit                 int
	appendFn            string
	appendV6            bool
	varLenFn            string
}

// ipfixBlocks reads the blocks of the package in dir, in the order of
// their bits, which must be 2, 4, 8 ... (the first bit is the family's).
func ipfixBlocks(dir string) ([]block, error) {
	fset := token.NewFileSet()
	paths, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	consts := map[string]int{}
	funcs := map[string]*ast.FuncDecl{}
	var out []block
	var lits []*ast.CompositeLit
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") || strings.HasPrefix(filepath.Base(p), "zz_generated") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
				funcs[strings.ToLower(fd.Name.Name)] = fd
				continue
			}
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range gd.Specs {
				vs, ok := s.(*ast.ValueSpec)
				if !ok {
					continue
				}
				for i, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && gd.Tok == token.CONST && lit.Kind == token.INT {
						n, _ := strconv.Atoi(lit.Value)
						consts[vs.Names[i].Name] = n
					}
					if cl, ok := v.(*ast.CompositeLit); ok && gd.Tok == token.VAR && isIdent(cl.Type, "block") {
						out = append(out, block{name: vs.Names[i].Name})
						lits = append(lits, cl)
					}
				}
			}
		}
	}
	for i := range out {
		bl := &out[i]
		for _, e := range lits[i].Elts {
			kv, _ := e.(*ast.KeyValueExpr)
			if kv == nil {
				continue
			}
			var src bytes.Buffer
			if err := format.Node(&src, fset, kv.Value); err != nil {
				return nil, err
			}
			switch {
			case isIdent(kv.Key, "bit"):
				bl.bitConst = src.String()
			case isIdent(kv.Key, "has"):
				bl.has = src.String()
			}
		}
		var ok bool
		if bl.bit, ok = consts[bl.bitConst]; !ok || bl.has == "" || strings.HasPrefix(bl.has, "func") {
			return nil, fmt.Errorf("%s: bit must be a constant (%q) and has a function's name (%q), called by name", bl.name, bl.bitConst, bl.has)
		}
		x := strings.TrimSuffix(bl.name, "Block")
		fd := funcs["append"+strings.ToLower(x)]
		if fd == nil {
			return nil, fmt.Errorf("%s: no func append%s", bl.name, GoName(x))
		}
		bl.appendFn, bl.appendV6 = fd.Name.Name, fd.Type.Params.NumFields() == 3
		if fd := funcs[strings.ToLower(x)+"varlen"]; fd != nil {
			bl.varLenFn = fd.Name.Name
		}
	}
	slices.SortFunc(out, func(a, b block) int { return a.bit - b.bit })
	for i, bl := range out {
		if bl.bit != 2<<i {
			return nil, fmt.Errorf("%s: bit %d, want %d (the blocks' bits are 2, 4, 8 ...)", bl.name, bl.bit, 2<<i)
		}
	}
	return out, nil
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// ipfixTables are the blocks and their count of variants.
func ipfixTables(blocks []block) string {
	var names []string
	for _, bl := range blocks {
		names = append(names, bl.name)
	}
	return fmt.Sprintf("// blocks are the optional blocks, in the order of their bits and of their\n"+
		"// fields in a record.\nvar blocks = []block{%s}\n\n"+
		"// variants counts the variants: the family's bit and one per block.\nconst variants = 2 << %d\n",
		strings.Join(names, ", "), len(blocks))
}

// ipfixRegions are the blocks' calls in recordVariant (variant v), recordLen
// (length n of variant v) and appendRecord (of variant).
func ipfixRegions(blocks []block) map[string][]string {
	out := map[string][]string{"variant": nil, "varlen": nil, "append": nil}
	for _, bl := range blocks {
		has := bl.has + "(r)"
		if m, ok := strings.CutPrefix(bl.has, "(*flow.Record)."); ok {
			has = "r." + m + "()"
		}
		out["variant"] = append(out["variant"], fmt.Sprintf("if %s {\n\tv |= %s\n}", has, bl.bitConst))
		if bl.varLenFn != "" {
			out["varlen"] = append(out["varlen"], fmt.Sprintf("if v&%s != 0 {\n\tn += %s(r)\n}", bl.bitConst, bl.varLenFn))
		}
		v6 := ""
		if bl.appendV6 {
			v6 = ", v6"
		}
		out["append"] = append(out["append"], fmt.Sprintf("if variant&%s != 0 {\n\tb = %s(b, r%s)\n}", bl.bitConst, bl.appendFn, v6))
	}
	return out
}
