package main

import (
	"fmt"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
)

// packageChart writes dir's chart as <name>-<version>.tgz into out, as
// helm package does, after checking that Chart.yaml's version and
// appVersion are both version: the chart a release tags deploys the image
// of the same release by default. Every file is stamped with at, so the
// same commit packages to the same bytes.
func packageChart(dir, version, out string, at time.Time) (string, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return "", fmt.Errorf("-chart: %w", err)
	}
	if err := versionsMatch(dir, ch.Metadata, version); err != nil {
		return "", err
	}
	ch.StampModTimes(at)
	return chartutil.Save(ch, out)
}

// checkChartVersion is packageChart's check alone, made before the image
// is built.
func checkChartVersion(dir, version string) error {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return fmt.Errorf("-chart: %w", err)
	}
	return versionsMatch(dir, ch.Metadata, version)
}

func versionsMatch(dir string, md *chart.Metadata, version string) error {
	if md.Version != version || md.AppVersion != version {
		return fmt.Errorf("%s/Chart.yaml has version %q and appVersion %q; a release of %s needs both %q (set them, commit, and run the release again)",
			dir, md.Version, md.AppVersion, version, version)
	}
	return nil
}
