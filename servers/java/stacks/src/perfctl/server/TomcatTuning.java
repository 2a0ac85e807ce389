package perfctl.server;

import org.springframework.boot.tomcat.servlet.TomcatServletWebServerFactory;
import org.springframework.boot.web.server.WebServerFactoryCustomizer;

/** Spring Boot's embedded Tomcat gets the same connector settings as the servlet server. */
final class TomcatTuning implements WebServerFactoryCustomizer<TomcatServletWebServerFactory> {
    private final Stack stack;

    TomcatTuning(Stack stack) {
        this.stack = stack;
    }

    @Override
    public void customize(TomcatServletWebServerFactory factory) {
        factory.addConnectorCustomizers(c -> {
            ServletMain.configure(c, stack.config);
            ServletMain.watch(stack, c);
        });
    }
}
