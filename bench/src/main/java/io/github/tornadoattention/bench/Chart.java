package io.github.tornadoattention.bench;

import java.awt.BasicStroke;
import java.awt.Color;
import java.awt.Font;
import java.awt.Graphics2D;
import java.awt.RenderingHints;
import java.awt.image.BufferedImage;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import javax.imageio.ImageIO;

/** A horizontal grouped bar chart of TFLOP/s by shape and backend (Java2D, headless). */
final class Chart {
    private static final List<String> MODE_PREFERENCE = List.of("device-timed kernel", "cuda events", "JMH resident");
    private static final Color[] COLORS = {new Color(0x1f77b4), new Color(0xff7f0e), new Color(0x2ca02c),
        new Color(0xd62728), new Color(0x9467bd), new Color(0x8c564b), new Color(0x7f7f7f)};

    private Chart() {
    }

    /** System property: a TrueType file to draw text with, for hosts without system fonts (GPU images). */
    static final String FONT_PROPERTY = "report.font";

    private static Font baseFont() {
        String path = System.getProperty(FONT_PROPERTY);
        if (path != null) {
            try {
                return Font.createFont(Font.TRUETYPE_FONT, new java.io.File(path));
            } catch (java.awt.FontFormatException | IOException e) {
                System.err.println("cannot use " + path + " (" + e + "); trying the system fonts");
            }
        }
        return new Font(Font.SANS_SERIF, Font.PLAIN, 12);
    }

    /**
     * What the chart shows: shape -> backend -> TFLOP/s of the most kernel-like mode measured. Also
     * written into the report's JSON, so bench/chart.py can draw the same chart where Java finds no fonts.
     */
    static Map<String, Map<String, Double>> data(List<GpuReport.Row> rows) {
        Map<String, Map<String, Double>> best = new LinkedHashMap<>();
        for (String mode : MODE_PREFERENCE) {
            for (GpuReport.Row r : rows) {
                if (r.mode().equals(mode)) {
                    best.computeIfAbsent(r.shape(), k -> new LinkedHashMap<>()).putIfAbsent(r.backend(), r.tflops());
                }
            }
        }
        return best;
    }

    static void write(List<GpuReport.Row> rows, Path png) {
        Map<String, Map<String, Double>> best = data(rows);
        Set<String> backends = new LinkedHashSet<>();
        best.values().forEach(m -> backends.addAll(m.keySet()));
        List<String> backendList = new ArrayList<>(backends);
        double max = best.values().stream().flatMap(m -> m.values().stream()).mapToDouble(Double::doubleValue).max().orElse(1);
        int bar = 9;
        int groupGap = 14;
        int left = 330;
        int top = 60;
        int plotWidth = 700;
        int height = top + best.size() * (backendList.size() * bar + groupGap) + 40 + 20 * backendList.size();
        BufferedImage image = new BufferedImage(left + plotWidth + 80, height, BufferedImage.TYPE_INT_RGB);
        Graphics2D g = image.createGraphics();
        g.setRenderingHint(RenderingHints.KEY_ANTIALIASING, RenderingHints.VALUE_ANTIALIAS_ON);
        g.setRenderingHint(RenderingHints.KEY_TEXT_ANTIALIASING, RenderingHints.VALUE_TEXT_ANTIALIAS_ON);
        g.setColor(Color.WHITE);
        g.fillRect(0, 0, image.getWidth(), image.getHeight());
        g.setColor(Color.BLACK);
        Font font = baseFont();
        g.setFont(font.deriveFont(Font.BOLD, 16f));
        g.drawString("Attention forward, TFLOP/s (kernel time, data on the device)", 20, 30);
        g.setFont(font.deriveFont(Font.PLAIN, 12f));
        int y = top;
        for (Map.Entry<String, Map<String, Double>> group : best.entrySet()) {
            g.setColor(Color.BLACK);
            g.drawString(group.getKey(), 10, y + backendList.size() * bar / 2 + 4);
            for (int b = 0; b < backendList.size(); b++) {
                Double tflops = group.getValue().get(backendList.get(b));
                if (tflops != null) {
                    int w = (int) Math.round(plotWidth * tflops / max);
                    g.setColor(COLORS[b % COLORS.length]);
                    g.fillRect(left, y + b * bar, Math.max(w, 1), bar - 1);
                    g.setColor(Color.DARK_GRAY);
                    g.drawString(String.format("%.1f", tflops), left + w + 4, y + b * bar + bar - 1);
                }
            }
            y += backendList.size() * bar + groupGap;
        }
        g.setColor(Color.GRAY);
        g.setStroke(new BasicStroke(1));
        g.drawLine(left, top - 5, left, y - groupGap + 5);
        y += 10;
        for (int b = 0; b < backendList.size(); b++) {
            g.setColor(COLORS[b % COLORS.length]);
            g.fillRect(left, y + b * 20, 14, 14);
            g.setColor(Color.BLACK);
            g.drawString(backendList.get(b), left + 20, y + b * 20 + 12);
        }
        g.dispose();
        try {
            ImageIO.write(image, "png", png.toFile());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
