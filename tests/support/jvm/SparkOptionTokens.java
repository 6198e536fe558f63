import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * Spark's own option-string splitter (the package-private
 * org.apache.spark.launcher.CommandBuilderUtils.parseOptionString) as a line protocol, for
 * the tests of allocator/backends/jvm_options.py.
 *
 * <p>Each input line is a string as hex UTF-16 code units (4 digits each); each answer is
 * "E" when Spark refuses it, else "T" then "|HEX" per token. "whitespace" as the only
 * argument prints every code point Character.isWhitespace accepts, one hex number a line;
 * "modules" prints the module options Spark adds for Java 17 (JavaModuleOptions).
 */
public final class SparkOptionTokens {
  public static void main(String[] args) throws Exception {
    if (args.length == 1 && args[0].equals("whitespace")) {
      for (int c = 0; c <= Character.MAX_CODE_POINT; c++) {
        if (Character.isWhitespace(c)) {
          System.out.println(Integer.toHexString(c));
        }
      }
      return;
    }
    if (args.length == 1 && args[0].equals("modules")) {
      Class<?> modules = Class.forName("org.apache.spark.launcher.JavaModuleOptions");
      System.out.println(modules.getMethod("defaultModuleOptions").invoke(null));
      return;
    }
    Class<?> utils = Class.forName("org.apache.spark.launcher.CommandBuilderUtils");
    Method parse = utils.getDeclaredMethod("parseOptionString", String.class);
    parse.setAccessible(true);
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
    String line;
    while ((line = in.readLine()) != null) {
      StringBuilder input = new StringBuilder();
      for (int i = 0; i + 4 <= line.length(); i += 4) {
        input.append((char) Integer.parseInt(line.substring(i, i + 4), 16));
      }
      StringBuilder out = new StringBuilder();
      try {
        @SuppressWarnings("unchecked")
        List<String> tokens = (List<String>) parse.invoke(null, input.toString());
        out.append('T');
        for (String token : tokens) {
          out.append('|');
          for (int i = 0; i < token.length(); i++) {
            out.append(String.format("%04x", (int) token.charAt(i)));
          }
        }
      } catch (InvocationTargetException e) {
        if (!(e.getCause() instanceof IllegalArgumentException)) {
          throw e;
        }
        out.append('E');
      }
      System.out.println(out);
      System.out.flush();
    }
  }
}
