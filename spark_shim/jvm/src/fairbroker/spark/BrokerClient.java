package fairbroker.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.TrustManager;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509TrustManager;

/**
 * The broker's tenant API: POST /v1/<Method> with protobuf-JSON bodies. With several
 * addresses (brokers run with --ha: one leads, the others stand by and answer 503 naming
 * it) each call goes to the one that answered last, and on to the next when that one is
 * unreachable or a standby; {@code baseUrl} is the one in use.
 */
final class BrokerClient {
  /** One answer from the broker; {@code body} is null when it was not JSON. */
  static final class Reply {
    final int status;
    final JsonNode body;
    final String text;

    Reply(int status, JsonNode body, String text) {
      this.status = status;
      this.body = body;
      this.text = text;
    }

    boolean ok() {
      return status >= 200 && status < 300;
    }

    /** 5xx, 408 and 429 may succeed later; other errors will not. */
    boolean retryable() {
      return status >= 500 || status == 408 || status == 429;
    }

    /** A standby broker's refusal (it names the leader); another address may lead. */
    boolean standby() {
      if (status != 503 || body == null) {
        return false;
      }
      String why = body.hasNonNull("error") ? body.get("error").asText()
          : body.hasNonNull("reason") ? body.get("reason").asText() : "";
      return why.startsWith("standby") || why.startsWith("taking over");
    }

    /** The broker's {"error": ..., "code": ...} as one line, or the raw body. */
    String error() {
      if (body != null && body.hasNonNull("error")) {
        String code = body.hasNonNull("code") ? " (" + body.get("code").asText() + ")" : "";
        return "HTTP " + status + ": " + body.get("error").asText() + code;
      }
      String raw = text == null ? "" : text.strip();
      return "HTTP " + status + (raw.isEmpty() ? "" : ": " + raw);
    }
  }

  private static final ObjectMapper JSON = new ObjectMapper();

  volatile String baseUrl;
  private final List<String> baseUrls;
  private final String token;
  private final HttpClient http;

  /**
   * {@code caFile}: null for plain HTTP; else a PEM file of the CA certificates to trust, and
   * {@code baseUrls} https:// URLs (the broker serves TLS with tls_cert and tls_key).
   */
  BrokerClient(List<String> baseUrls, String token, String caFile) {
    this.baseUrls = List.copyOf(baseUrls);
    this.baseUrl = this.baseUrls.get(0);
    this.token = token;
    // HTTP/1.1: the default HTTP/2 upgrade attempt confuses some plain HTTP servers.
    HttpClient.Builder builder =
        HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(3));
    if (caFile != null) {
      builder.sslContext(trusting(caFile));
    }
    this.http = builder.build();
  }

  /** A TLS context that trusts the certificates in {@code caFile} and nothing else. */
  static SSLContext trusting(String caFile) {
    try (InputStream in = Files.newInputStream(Path.of(caFile))) {
      KeyStore store = KeyStore.getInstance(KeyStore.getDefaultType());
      store.load(null, null);
      int count = 0;
      for (Certificate cert : CertificateFactory.getInstance("X.509").generateCertificates(in)) {
        store.setCertificateEntry("ca-" + count++, cert);
      }
      if (count == 0) {
        throw new GeneralSecurityException("no certificate in it");
      }
      TrustManagerFactory trust =
          TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
      trust.init(store);
      SSLContext context = SSLContext.getInstance("TLS");
      context.init(null, trust.getTrustManagers(), null);
      return context;
    } catch (IOException | GeneralSecurityException e) {
      throw new IllegalArgumentException(
          "fairbroker: cannot use spark.fairbroker.caFile " + caFile + ": " + e.getMessage(), e);
    }
  }

  /**
   * Does the broker at {@code baseUrl} (plain http://) answer a TLS handshake with a
   * certificate? Asked when plain HTTP gets no answer, so that a driver missing the CA says
   * so instead of retrying forever. Only the handshake is made (nothing is sent after it, no
   * token), trusting any certificate just to see one; false when unsure.
   */
  static boolean speaksTls(String baseUrl) {
    URI uri = URI.create(baseUrl);
    boolean[] certified = {false};
    X509TrustManager seeing =
        new X509TrustManager() {
          @Override
          public void checkClientTrusted(X509Certificate[] chain, String auth) {}

          @Override
          public void checkServerTrusted(X509Certificate[] chain, String auth) {
            certified[0] = chain != null && chain.length > 0;
          }

          @Override
          public X509Certificate[] getAcceptedIssuers() {
            return new X509Certificate[0];
          }
        };
    try (Socket raw = new Socket()) {
      raw.connect(new InetSocketAddress(uri.getHost(), uri.getPort()), 3000);
      raw.setSoTimeout(3000);
      SSLContext probe = SSLContext.getInstance("TLS");
      probe.init(null, new TrustManager[] {seeing}, null);
      try (SSLSocket tls =
          (SSLSocket)
              probe.getSocketFactory().createSocket(raw, uri.getHost(), uri.getPort(), false)) {
        tls.startHandshake();
      }
    } catch (IOException | GeneralSecurityException e) {
      return certified[0];
    }
    return certified[0];
  }

  /** {@code sparkbroker://HOST:PORT} to {@code http://HOST:PORT} (the first address). */
  static String baseUrl(String masterUrl) {
    return baseUrls(masterUrl, false).get(0);
  }

  /** {@code sparkbroker://H1:P1,H2:P2} to {@code [http(s)://H1:P1, http(s)://H2:P2]}. */
  static List<String> baseUrls(String masterUrl, boolean tls) {
    String rest = masterUrl.substring(BrokerClusterManager.SCHEME.length());
    while (rest.endsWith("/")) {
      rest = rest.substring(0, rest.length() - 1);
    }
    List<String> out = new ArrayList<>();
    for (String one : rest.split(",", -1)) {
      URI uri;
      try {
        uri = URI.create("http://" + one);
      } catch (IllegalArgumentException e) {
        uri = null;
      }
      if (one.isEmpty() || uri == null || uri.getHost() == null || uri.getPort() < 0
          || (uri.getPath() != null && !uri.getPath().isEmpty())) {
        throw new IllegalArgumentException(
            "fairbroker: master URL must be sparkbroker://HOST:PORT (or HOST:PORT,HOST:PORT "
                + "for brokers run with --ha), got " + masterUrl);
      }
      out.add((tls ? "https://" : "http://") + one);
    }
    return out;
  }

  /**
   * One call, to the address in use first and then to the others in turn while an address
   * is unreachable or a standby. The first other answer is returned (and its address kept);
   * if every address stood by, a standby's 503 (retryable); if none answered, the last error.
   */
  Reply post(String method, Map<String, ?> body, Duration timeout)
      throws IOException, InterruptedException {
    String first = baseUrl;
    int start = Math.max(0, baseUrls.indexOf(first));
    Reply standby = null;
    IOException unreachable = null;
    for (int i = 0; i < baseUrls.size(); i++) {
      String url = baseUrls.get((start + i) % baseUrls.size());
      try {
        Reply reply = postTo(url, method, body, timeout);
        if (baseUrls.size() > 1 && reply.standby()) {
          standby = reply;
          continue;
        }
        baseUrl = url;
        return reply;
      } catch (IOException e) {
        unreachable = e;
      }
    }
    if (standby != null) {
      return standby;
    }
    throw unreachable;
  }

  private Reply postTo(String url, String method, Map<String, ?> body, Duration timeout)
      throws IOException, InterruptedException {
    HttpRequest.Builder request =
        HttpRequest.newBuilder(URI.create(url + "/v1/" + method))
            .timeout(timeout)
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString(JSON.writeValueAsString(body)));
    if (token != null && !token.isEmpty()) {
      request.header("Authorization", "Bearer " + token);
    }
    HttpResponse<String> response;
    try {
      response = http.send(request.build(), HttpResponse.BodyHandlers.ofString());
    } catch (HttpTimeoutException e) {
      throw e;
    } catch (IOException closed) {
      // A pooled connection the server had just closed (its keep-alive ended while the
      // request was being sent) fails with no bytes read. Every call of this API may be
      // repeated (Register with the same id, Heartbeat, SetTarget, Kill, Unregister), so
      // one more try on a fresh connection; a broker that is really down fails again.
      response = http.send(request.build(), HttpResponse.BodyHandlers.ofString());
    }
    JsonNode parsed = null;
    try {
      if (response.body() != null && !response.body().isBlank()) {
        parsed = JSON.readTree(response.body());
      }
    } catch (IOException notJson) {
      parsed = null;
    }
    return new Reply(response.statusCode(), parsed, response.body());
  }

  static String json(Object value) {
    try {
      return JSON.writeValueAsString(value);
    } catch (IOException e) {
      return String.valueOf(value);
    }
  }
}
