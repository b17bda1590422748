package doccheck

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Link is one link of a page's prose.
type Link struct {
	Line   int
	Target string
}

var (
	// inlineLink is [text](target "title") and ![alt](target); the text may
	// hold one level of brackets, as a badge's image does.
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// refDef is a reference definition: [label]: target.
	refDef = regexp.MustCompile(`(?m)^[ \t]{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	// htmlRef is an href or src attribute of inline HTML.
	htmlRef = regexp.MustCompile(`(?i)\b(?:href|src)\s*=\s*"([^"]*)"`)
	// scheme starts an absolute URL (https:, mailto:), never fetched.
	scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// Links returns the links of a page outside its code: inline links and
// images (whose text may wrap onto the next lines), reference definitions
// and HTML href/src attributes. A link's line is its target's.
func Links(text string) []Link {
	_, prose := Blocks(text)
	lines := strings.Split(prose, "\n")
	for i, line := range lines {
		lines[i] = blankCode(line)
	}
	prose = strings.Join(lines, "\n")
	var links []Link
	for _, re := range []*regexp.Regexp{inlineLink, refDef, htmlRef} {
		for _, m := range re.FindAllStringSubmatchIndex(prose, -1) {
			line := 1 + strings.Count(prose[:m[2]], "\n")
			links = append(links, Link{Line: line, Target: prose[m[2]:m[3]]})
		}
	}
	slices.SortStableFunc(links, func(a, b Link) int { return a.Line - b.Line })
	return links
}

// blankCode blanks the inline code spans of a line, whose brackets are
// not links: a run of backticks up to the next run of the same length.
func blankCode(line string) string {
	b := []byte(line)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		n := run(b, i)
		end := -1
		for j := i + n; j < len(b); {
			if b[j] != '`' {
				j++
				continue
			}
			m := run(b, j)
			if m == n {
				end = j + m
				break
			}
			j += m
		}
		if end < 0 {
			i += n // no closing run: the backticks are literal
			continue
		}
		for k := i; k < end; k++ {
			b[k] = ' '
		}
		i = end
	}
	return string(b)
}

// run counts the backticks starting at i.
func run(b []byte, i int) int {
	n := 0
	for i+n < len(b) && b[i+n] == '`' {
		n++
	}
	return n
}

var (
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	htmlAnchor = regexp.MustCompile(`(?i)<a\s[^>]*\b(?:name|id)\s*=\s*"([^"]+)"`)
	mdLink     = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]*>`)
)

// Anchors returns the anchors GitHub gives a page: one per heading, by
// its slug rules, and any <a name> or <a id> of its HTML.
func Anchors(text string) map[string]bool {
	_, prose := Blocks(text)
	anchors := map[string]bool{}
	// occurrences counts each slug as github-slugger does: a repeated
	// heading gets -1, -2..., skipping any slug already taken.
	occurrences := map[string]int{}
	for _, line := range strings.Split(prose, "\n") {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := Slug(m[2])
		unique := slug
		for _, taken := occurrences[unique]; taken; _, taken = occurrences[unique] {
			occurrences[slug]++
			unique = slug + "-" + strconv.Itoa(occurrences[slug])
		}
		occurrences[unique] = 0
		anchors[unique] = true
	}
	return anchors
}

// Slug is GitHub's anchor for a heading: the text it renders (links by
// their text, code without backticks, no emphasis or tags), lower-cased,
// everything but letters, digits, marks, '-', '_' and spaces dropped, and
// each space a '-'.
func Slug(heading string) string {
	text := mdLink.ReplaceAllString(heading, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	text = strings.ToLower(strings.TrimSpace(text))
	var b strings.Builder
	for _, r := range text {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.M, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// CheckLinks resolves every relative link of the pages: its file exists
// in the repository under root, and its #anchor is a heading's of the
// target page (or of the page itself). It returns one line per broken
// link, as file:line: target: why.
func CheckLinks(root string, pages []Page) []string {
	anchors := map[string]map[string]bool{}
	for _, p := range pages {
		anchors[p.Path] = Anchors(p.Text)
	}
	anchorsOf := func(rel string) (map[string]bool, error) {
		if a, ok := anchors[rel]; ok {
			return a, nil
		}
		text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel))) //nolint:gosec // G304: a page of the repository a link names; resolve keeps it inside root
		if err != nil {
			return nil, err
		}
		anchors[rel] = Anchors(string(text))
		return anchors[rel], nil
	}
	var broken []string
	for _, p := range pages {
		for _, l := range Links(p.Text) {
			if why := resolve(root, p.Path, l.Target, anchorsOf); why != "" {
				broken = append(broken, fmt.Sprintf("%s:%d: %s: %s", p.Path, l.Line, l.Target, why))
			}
		}
	}
	return broken
}

// resolve says why target, linked from page, does not resolve, or "".
func resolve(root, page, target string, anchorsOf func(string) (map[string]bool, error)) string {
	if target == "" {
		return "an empty link"
	}
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // external: not fetched
	}
	file, anchor, _ := strings.Cut(target, "#")
	file, err := url.PathUnescape(file)
	if err != nil {
		return fmt.Sprintf("cannot be unescaped: %v", err)
	}
	rel := page
	if file != "" {
		if strings.HasPrefix(file, "/") {
			rel = path.Clean(strings.TrimPrefix(file, "/"))
		} else {
			rel = path.Join(path.Dir(page), file)
		}
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return "points outside the repository"
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
			return fmt.Sprintf("%s does not exist", rel)
		}
	}
	if anchor == "" || !strings.HasSuffix(rel, ".md") {
		return ""
	}
	a, err := anchorsOf(rel)
	if err != nil {
		return err.Error()
	}
	if !a[anchor] {
		return fmt.Sprintf("%s has no heading with anchor #%s", rel, anchor)
	}
	return ""
}
